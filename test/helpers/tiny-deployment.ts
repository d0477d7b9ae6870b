import { parseDeployment } from '../../src/control/load-deployment.js';

/** One replica of the sim engine, profile `tiny` (model sim/tiny, 200 ms load): the smallest deployment a control plane places. */
export const TINY_DEPLOYMENT = parseDeployment(
  `
profiles:
  tiny:
    engine: sim
    model: sim/tiny
    served_model_name: tiny
    args: [--load-time, 200ms]
    startup_timeout: 1m
replicas:
  - name: tiny
    profile: tiny
`,
  'tiny.yaml',
);
