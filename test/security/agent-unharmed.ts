import { readFileSync } from 'node:fs';
import { expect } from 'vitest';

/** The bound on the attacked agent's memory: its peak resident set. */
export const MAX_AGENT_RSS_BYTES = 200 * 1024 * 1024;

/**
 * What every attack of this suite must leave: the agent still running (not
 * exited, not a zombie) and its peak RSS (VmHWM, the most it ever held, so a
 * spike collected since still counts) under MAX_AGENT_RSS_BYTES.
 */
export function expectAgentUnharmed(pid: number): void {
  let status: string;
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    throw new Error(`the agent (pid ${pid}) is gone`);
  }
  expect(/^State:\s+(\S)/m.exec(status)?.[1], `the agent (pid ${pid}) has exited`).not.toBe('Z');
  const peak = Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1]) * 1024;
  if (process.env.SEC_DEBUG) console.log(`agent ${pid}: peak RSS ${(peak / 1024 / 1024).toFixed(1)} MB`);
  expect(peak, 'the agent reports its peak RSS').toBeGreaterThan(0);
  expect(peak, `the agent's peak RSS, ${(peak / 1024 / 1024).toFixed(1)} MB`).toBeLessThan(MAX_AGENT_RSS_BYTES);
}
