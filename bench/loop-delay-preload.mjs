// Preloaded into the agent by bench/loop-during-pull.ts (NODE_OPTIONS=--import): the event loop's delay as a 10 ms
// timer's lateness, each sample raw (Date.now() and ms late), appended to LOOPMON_FILE every 200 ms. Raw samples,
// not monitorEventLoopDelay's histogram, so the bench cuts them by phase (before the pull, during it).
import { appendFileSync } from 'node:fs';

const file = process.env.LOOPMON_FILE;
if (file) {
  const PERIOD_MS = 10;
  let expected = performance.now() + PERIOD_MS;
  let lines = [];
  let flushedAt = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    lines.push(`${Date.now()} ${(now - expected).toFixed(2)}`);
    expected = now + PERIOD_MS;
    if (now - flushedAt > 200) {
      appendFileSync(file, `${lines.join('\n')}\n`);
      lines = [];
      flushedAt = now;
    }
  }, PERIOD_MS);
  timer.unref();
}
