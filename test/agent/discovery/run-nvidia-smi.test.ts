import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runNvidiaSmi } from '../../../src/agent/discovery/run-nvidia-smi.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Processes whose command line names `path`. */
function running(path: string): number {
  let n = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(path)) n++;
    } catch {
      // Gone while scanned.
    }
  }
  return n;
}

describe('runNvidiaSmi', () => {
  it('starts calls made together in separate turns of the event loop, so a death is read between their spawns', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-smi-turns-'));
    dirs.push(dir);
    // A slow nvidia-smi (a busy driver): each call is still running when the next is started.
    const smi = join(dir, 'nvidia-smi');
    writeFileSync(smi, '#!/bin/sh\nsleep 1\n');
    chmodSync(smi, 0o755);

    // What the loop sees at each turn: how many of the calls run.
    const seen: number[] = [];
    let done = false;
    const tick = () => {
      seen.push(running(smi));
      if (!done) setImmediate(tick);
    };
    setImmediate(tick);
    const calls = [['-L'], ['--query-compute-apps=pid'], ['--version']].map((args) => runNvidiaSmi(smi, args, { timeoutMs: 10_000 }));
    const results = await Promise.all(calls);
    done = true;
    expect(results.map((r) => r.ok)).toEqual([true, true, true]);
    // Until all three run (they end one by one after): spawned in one turn,
    // the loop would see none, then all three.
    const starting = seen.slice(0, seen.indexOf(3));
    expect(seen).toContain(3);
    expect(starting.some((n) => n > 0)).toBe(true);
  });

  /** A fake nvidia-smi: `body` as a shell script. */
  function fake(body: string, mode = 0o755): string {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-smi-'));
    dirs.push(dir);
    const smi = join(dir, 'nvidia-smi');
    writeFileSync(smi, `#!/bin/sh\n${body}\n`);
    chmodSync(smi, mode);
    return smi;
  }

  it('gives stdout without its final newline, in the C locale, with the rest of the environment kept', async () => {
    process.env.LLMGW_SMI_TEST_KEPT = 'kept';
    try {
      const r = await runNvidiaSmi(fake('printf "%s %s\\n\\n" "$LC_ALL" "$LLMGW_SMI_TEST_KEPT"'), [], { timeoutMs: 10_000 });
      expect(r).toEqual({ ok: true, stdout: 'C kept\n' });
    } finally {
      delete process.env.LLMGW_SMI_TEST_KEPT;
    }
  });

  it('says a missing nvidia-smi is not found, and one without the execute bit is not executable', async () => {
    const missing = await runNvidiaSmi('/nonexistent/nvidia-smi', ['-L'], { timeoutMs: 10_000 });
    expect(missing).toMatchObject({ ok: false, kind: 'not-found', reason: 'nvidia-smi (/nonexistent/nvidia-smi) not found' });
    const smi = fake('echo hi', 0o644);
    const denied = await runNvidiaSmi(smi, ['-L'], { timeoutMs: 10_000 });
    expect(denied).toMatchObject({ ok: false, kind: 'spawn', reason: `nvidia-smi (${smi}) is not executable` });
  });

  it('reports a non-zero exit with the first line it printed, on either stream, and keeps what stdout listed', async () => {
    const smi = fake('echo "GPU 0: A"\necho "" >&2\necho "  Unable to determine the device handle for GPU1" >&2\nexit 15');
    const r = await runNvidiaSmi(smi, ['-L'], { timeoutMs: 10_000 });
    expect(r).toMatchObject({ ok: false, kind: 'exit', exitCode: 15, stdout: 'GPU 0: A', reason: 'nvidia-smi -L exited with 15: GPU 0: A' });
    expect(r.ok ? '' : r.output).toContain('Unable to determine the device handle for GPU1');
    const quiet = await runNvidiaSmi(fake('exit 9'), ['-L'], { timeoutMs: 10_000 });
    expect(quiet).toMatchObject({ ok: false, kind: 'exit', exitCode: 9, reason: 'nvidia-smi -L exited with 9' });
  });

  it('kills the whole process group at the deadline, a grandchild holding the pipe included, and says it timed out', async () => {
    const smi = fake('sleep 30 &\nsleep 30');
    const began = Date.now();
    const r = await runNvidiaSmi(smi, ['topo', '-m'], { timeoutMs: 300 });
    expect(r).toMatchObject({ ok: false, kind: 'timeout', reason: 'nvidia-smi topo -m did not answer within 300ms' });
    // A safety net, not a speed test: with only the child killed, the grandchild's pipe held the call for 30 s.
    expect(Date.now() - began).toBeLessThan(20_000);
  });

  it('says one killed by a signal it was not sent by us could not run, never that it answered', async () => {
    const r = await runNvidiaSmi(fake('kill -TERM $$'), ['-L'], { timeoutMs: 10_000 });
    expect(r).toMatchObject({ ok: false, kind: 'spawn', reason: 'nvidia-smi -L could not run: it was killed with SIGTERM' });
  });

  it('throws when the caller aborts, and leaves no process behind', async () => {
    const smi = fake('sleep 30');
    const ac = new AbortController();
    const call = runNvidiaSmi(smi, ['-L'], { timeoutMs: 60_000, signal: ac.signal });
    setTimeout(() => ac.abort(new Error('shutting down')), 200);
    await expect(call).rejects.toThrow('shutting down');
    for (let i = 0; i < 100 && running(smi) > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(running(smi)).toBe(0);
  });
});
