import { execFileSync } from 'node:child_process';
import { execa } from 'execa';

/*
 * nft (Debian's `nftables`), which the agent runs to guard a sleep-mode
 * shard's port (src/agent/supervisor/shard/sleep-port-guards.ts): every vLLM or SGLang double
 * started with sleep_mode in this suite needs it, so the suite's global
 * set-up installs it where it is missing, as root, from the machine's apt
 * sources, and says how to get it where it cannot. The README's test command
 * then does all set-up on a fresh machine.
 */

function present(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v nft'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Returns once `nft` is on PATH, installing `nftables` with apt-get when missing; throws a one-line fix when it cannot. */
export async function ensureNft(): Promise<void> {
  if (present()) return;
  const how = 'install it: `sudo apt-get update && sudo apt-get install -y nftables`';
  if (process.getuid?.() !== 0) throw new Error(`nft is missing and this test run is not root, so it cannot install it; ${how}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', '--no-install-recommends', 'nftables']]) {
    const r = await execa('apt-get', args, { reject: false, env, stdin: 'ignore', all: true });
    if (r.exitCode !== 0) throw new Error(`nft is missing and \`apt-get ${args.join(' ')}\` failed (exit ${r.exitCode}): ${String(r.all).trim().split('\n').slice(-3).join(' | ')}; ${how}`);
  }
  if (!present()) throw new Error(`apt-get installed nftables but nft is still missing; ${how}`);
}
