
import { describe, expect, it, onTestFinished } from 'vitest';
import { startBadControlPlane } from '../faults/scenarios/bad-control-plane.js';
import { startAgentProcess, tempAgentDirs } from '../helpers/agent-process.js';
import { freePort } from '../helpers/engine-processes.js';
import { runCli } from '../helpers/run-cli.js';

/** A control plane that opens the stream and never sends a message, and an agent on it for `watchMs`. */
async function streamsOnSilentControlPlane(registerTimeout: string, watchMs: number): Promise<{ streams: number; socket: string }> {
  const port = await freePort();
  const cp = await startBadControlPlane('silent-stream', port);
  onTestFinished(() => cp.close());
  const dirs = tempAgentDirs('llmgw-regtimeout-');
  startAgentProcess({ server: `http://127.0.0.1:${port}`, dirs, registerTimeout });
  const deadline = Date.now() + 20_000;
  while (cp.streams() === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(cp.streams()).toBeGreaterThan(0);
  await new Promise((r) => setTimeout(r, watchMs));
  return { streams: cp.streams(), socket: dirs.socket };
}

describe('register_timeout', () => {
  it('drops a stream the control plane says nothing on, and reconnects', async () => {
    expect((await streamsOnSilentControlPlane('500ms', 3000)).streams).toBeGreaterThanOrEqual(2);
  });

  it('0s keeps the stream of a control plane that sends nothing until it has a command', async () => {
    const { streams, socket } = await streamsOnSilentControlPlane('0s', 3000);
    expect(streams).toBe(1);
    // Register written counts as connected: nothing else will ever say so.
    const r = await runCli(['ctl', 'status', '--json', '--socket', socket]);
    expect(JSON.parse(r.stdout).connection.state).toBe('CONNECTION_STATE_CONNECTED');
  });
});
