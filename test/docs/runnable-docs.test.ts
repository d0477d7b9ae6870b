import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { docPages, type FencedBlock, fencedBlocks } from '../helpers/doc-pages.js';
import { killEverything, processesWritingUnder, until } from '../helpers/engine-processes.js';
import { BIN, REPO_ROOT } from '../helpers/run-cli.js';

/*
 * Every command block the docs mark `sh runnable` runs as written, in page
 * order, against one real `llmgw dev up --engine vllm` (docs/README.md,
 * "Runnable blocks", is the convention): `llmgw` on PATH, LLMGW_SOCKET and
 * LLMGW_CONFIG naming dev up's agent, TMPDIR and XDG_CONFIG_HOME the test's
 * own. A block that exits non-zero fails the test with its page and line.
 */

/** dev up to "Press Ctrl-C" is 3 s on an idle machine; the bound is a safety net for a loaded one. */
const DEV_UP_READY_MS = 90_000;
/** One block's safety net: every block here takes seconds. */
const BLOCK_TIMEOUT_MS = 60_000;

function runnable(): FencedBlock[] {
  return docPages().flatMap((page) => fencedBlocks(page).filter((b) => b.info.includes('runnable')));
}

/** The environment every block runs in: the caller's, without any LLMGW_* of its own, plus the convention's. */
function blockEnv(parent: string, socket: string, config: string): Record<string, string> {
  const bin = join(parent, 'bin');
  mkdirSync(bin);
  // What `npm link` puts on PATH: the checkout's bin/run.js under the name llmgw.
  writeFileSync(join(bin, 'llmgw'), `#!/bin/sh\nexec '${process.execPath}' '${BIN}' "$@"\n`);
  chmodSync(join(bin, 'llmgw'), 0o755);
  const tmp = join(parent, 'tmp');
  const xdg = join(parent, 'xdg');
  mkdirSync(tmp);
  mkdirSync(xdg);
  const inherited = Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => !e[0].startsWith('LLMGW_') && e[1] !== undefined));
  return {
    ...inherited,
    PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    LLMGW_SOCKET: socket,
    LLMGW_CONFIG: config,
    TMPDIR: tmp,
    XDG_CONFIG_HOME: xdg,
    NO_COLOR: '1',
  };
}

/** Starts `dev up --engine vllm` under `parent` and resolves with its agent's socket and config once it is ready. */
async function devUp(parent: string): Promise<{ socket: string; config: string }> {
  const child = execa(process.execPath, [BIN, 'dev', 'up', '--engine', 'vllm'], {
    cwd: REPO_ROOT,
    reject: false,
    stdin: 'ignore',
    env: { TMPDIR: parent, NO_COLOR: '1' },
    extendEnv: false,
  });
  let stdout = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  onTestFinished(async () => {
    // Ctrl-C as an operator stops it: every shard, the agent, then what its state names.
    if (child.exitCode === null) child.kill('SIGINT');
    const ended = await Promise.race([child.then(() => true), new Promise((r) => setTimeout(r, 20_000, false))]);
    if (!ended) child.kill('SIGKILL');
    await child;
    await killEverything(parent);
    rmSync(parent, { recursive: true, force: true });
  });
  await until(() => /^Press Ctrl-C/m.test(stdout) || child.exitCode !== null, "dev up's ready summary", DEV_UP_READY_MS).catch((err: Error) => {
    throw new Error(`${err.message}; it printed:\n${stdout}`);
  });
  const socket = /ctl status --socket '([^']+)'/.exec(stdout)?.[1];
  const config = /models list --config '([^']+)'/.exec(stdout)?.[1];
  if (!socket || !config) throw new Error(`dev up exited (${child.exitCode}) or printed no socket and config:\n${stdout}`);
  return { socket, config };
}

describe('runnable blocks in README.md and docs/', () => {
  it('are sh blocks, on several pages', () => {
    const blocks = runnable();
    expect(blocks.filter((b) => b.info[0] !== 'sh' || b.info.length !== 2).map((b) => `${b.page}:${b.line} \`\`\`${b.info.join(' ')}`)).toEqual([]);
    expect(new Set(blocks.map((b) => b.page)).size).toBeGreaterThanOrEqual(5);
  });

  it('each runs as written against dev up --engine vllm, and leaves no process behind', async () => {
    const blocks = runnable();
    expect(blocks.length).toBeGreaterThanOrEqual(10);
    const parent = mkdtempSync(join(tmpdir(), 'llmgw-docs-test-'));
    const { socket, config } = await devUp(parent);
    const env = blockEnv(parent, socket, config);
    expect(await runBlocks(blocks, env)).toEqual([]);
    // Nothing a block started outlives it.
    expect(processesWritingUnder(join(parent, 'tmp'))).toEqual([]);
  }, 240_000);

  it('fail on any command that fails, a pipeline\'s included, and pass a block that succeeds', async () => {
    const block = (body: string): FencedBlock => ({ page: 'look-alike.md', line: 1, info: ['sh', 'runnable'], body });
    const failed = await runBlocks([block('true\necho ok | cat'), block('false\necho never'), block('false | cat'), block('exit 3'), block('echo "$UNSET_VARIABLE"')], { PATH: process.env.PATH ?? '/usr/bin:/bin' });
    expect(failed.map((f) => f.split('\n')[0])).toEqual(['look-alike.md:1 exited 1:', 'look-alike.md:1 exited 1:', 'look-alike.md:1 exited 3:', 'look-alike.md:1 exited 1:']);
  });
});

/** Runs each block in its own bash -euo pipefail, in order; returns one report per block that failed. */
async function runBlocks(blocks: FencedBlock[], env: Record<string, string>): Promise<string[]> {
  const failed: string[] = [];
  for (const b of blocks) {
    const r = await execa('bash', ['-euo', 'pipefail', '-c', b.body], { cwd: REPO_ROOT, env, extendEnv: false, reject: false, stdin: 'ignore', timeout: BLOCK_TIMEOUT_MS });
    if (r.exitCode !== 0) failed.push(`${b.page}:${b.line} exited ${r.exitCode ?? r.signal}:\n${b.body}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
  }
  return failed;
}
