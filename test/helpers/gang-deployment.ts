import { parseDeployment } from '../../src/control/load-deployment.js';
import type { Deployment } from '../../src/control/deployment.js';

/**
 * One sim replica over two nodes, one GPU each (TP 2): the smallest gang the
 * reference control plane places, for the gang tests and bench 15. `args`
 * ride after the sim's 200 ms load.
 */
export function gangDeployment(args: string[] = []): Deployment {
  return parseDeployment(
    `
profiles:
  gang:
    engine: sim
    model: sim/gang
    served_model_name: gang
    tensor_parallel_size: 2
    args: ${JSON.stringify(['--load-time', '200ms', ...args])}
    startup_timeout: 1m
replicas:
  - name: gang
    profile: gang
    nnodes: 2
    gpus_per_shard: 1
`,
    'gang.yaml',
  );
}
