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

/**
 * One replica of a real engine's double over two nodes, one GPU each, with
 * `args` after a 200 ms load: vLLM data parallel (`--data-parallel-size 2`,
 * a DP rank per node: rank 0 holds the rpc handshake port only while
 * starting), vLLM or SGLang tensor parallel (TP 2, rank 0 holds the store).
 * The agents run the doubles (DOUBLE_ENGINES_YAML). `startupTimeout` is
 * the profile's startup_timeout, also rank 0's start-up deadline in its
 * peers' gang watch (rank0StartDeadlineMs).
 */
export function engineGangDeployment(shape: 'vllm-dp' | 'vllm-tp' | 'sglang-tp', args: string[] = [], startupTimeout = '2m'): Deployment {
  const engine = shape === 'sglang-tp' ? 'sglang' : 'vllm';
  const tp = shape === 'vllm-dp' ? 1 : 2;
  const own = shape === 'vllm-dp' ? ['--data-parallel-size', '2'] : [];
  return parseDeployment(
    `
profiles:
  gang:
    engine: ${engine}
    model: org/m
    served_model_name: gang
    tensor_parallel_size: ${tp}
    args: ${JSON.stringify([...own, '--sim-load-time', '200ms', ...args])}
    startup_timeout: ${startupTimeout}
replicas:
  - name: gang
    profile: gang
    nnodes: 2
    gpus_per_shard: 1
`,
    'gang.yaml',
  );
}
