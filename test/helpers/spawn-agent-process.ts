import { execa, type ResultPromise } from 'execa';
import { BIN } from './run-cli.js';

// Free of vitest, so the soak driver starts agents exactly as tests do.

export interface SpawnedAgent {
  child: ResultPromise;
  /** Parsed JSON log records written to stderr so far (a non-JSON line becomes { msg }). */
  records: Record<string, unknown>[];
}

/** Runs `llmgw agent run --config <path>` on the fake 8-GPU box, collecting its JSON logs. */
export function spawnAgentProcess(configPath: string, env: Record<string, string> = {}): SpawnedAgent {
  const child = execa(process.execPath, [BIN, 'agent', 'run', '--config', configPath], {
    reject: false,
    stdin: 'ignore',
    env: { LLMGW_FAKE_GPUS: 'hgx-h100x8', ...env },
    buffer: false,
  });
  const records: Record<string, unknown>[] = [];
  let partial = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      try {
        records.push(JSON.parse(line));
      } catch {
        records.push({ msg: line });
      }
    }
  });
  return { child, records };
}
