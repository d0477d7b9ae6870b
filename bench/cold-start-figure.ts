/**
 * Figure 1: cold starts of the CLI, each beside `node -e 0` and alternated
 * run by run: `llmgw --version` (1a), `llmgw ctl status` against a running
 * agent (1b), and `ctl status --json` beside its floor, bench/ctl-floor.mjs (1c).
 */
import { fileURLToPath } from 'node:url';
import { BIN } from '../test/helpers/run-cli.js';
import { isRegister } from '../test/helpers/sim-shards.js';
import { controlPlane, newRoot, sleep, spawnAgent } from './bench-support.js';
import { ms, timeSideBySide } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';

const CTL_FLOOR = fileURLToPath(new URL('./ctl-floor.mjs', import.meta.url));

export async function coldStartFigure(rows: BenchRow[], quick: boolean): Promise<void> {
  const { cp, url } = await controlPlane();
  const dirs = newRoot('f1');
  spawnAgent(url, dirs);
  await cp.waitFor('node-a', isRegister, 30_000);
  await sleep(300);
  const node = process.execPath;
  const [base, version, status, statusJson, floor] = timeSideBySide(
    [
      [node, '-e', '0'],
      [node, BIN, '--version'],
      [node, BIN, 'ctl', 'status', '--socket', dirs.socket],
      [node, BIN, 'ctl', 'status', '--json', '--socket', dirs.socket],
      [node, CTL_FLOOR, dirs.socket],
    ],
    quick ? 8 : 20,
  ) as [number, number, number, number, number];
  rows.push({ figure: '1a cold start `llmgw --version`', measured: ms(version), reference: `node -e 0: ${ms(base)}`, target: '<= 2.5x', met: version / base <= 2.5 });
  rows[rows.length - 1]!.measured += ` (${(version / base).toFixed(2)}x)`;
  rows.push({ figure: '1b cold start `llmgw ctl status`', measured: `${ms(status)} (${(status / base).toFixed(2)}x)`, reference: `node -e 0: ${ms(base)}`, target: '<= 1.3x', met: status / base <= 1.3 });
  rows.push({
    figure: '1c cold start `llmgw ctl status --json` beside its floor (bench/ctl-floor.mjs: one Status call, HTTP/1.1 on node:net alone)',
    measured: `${ms(statusJson)} (${(statusJson / base).toFixed(2)}x node, ${(statusJson / floor).toFixed(2)}x floor)`,
    reference: `floor: ${ms(floor)} (${(floor / base).toFixed(2)}x node)`,
    target: 'recorded',
    met: undefined,
  });
}
