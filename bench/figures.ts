/**
 * The figures of `npm run bench` by the name `--only` takes, each bound to
 * the run's table rows, notes and --quick. They run in Object.entries order:
 * the numbered ones first, in numeric order, then nvml, fleet, pidfd, floor.
 */
import { adoptedReadyFigure, sigtermExitFigure } from './agent-restart-figures.js';
import { coldStartFigure } from './cold-start-figure.js';
import { discoverFigure, nvmlFigures } from './discovery-figures.js';
import { deathReportFigure, pidfdFigure, unitDeathFigure } from './engine-death-figures.js';
import { readyAfterAnswerFigure, stopDrainFigure } from './engine-behaviour-figures.js';
import { type BenchRow, fleetFigure } from './fleet-figure.js';
import { floorFigures } from './floor-figures.js';
import { ctlLogsFigure, logThroughputFigure } from './log-figures.js';
import { readinessFigure } from './readiness-figure.js';
import { shardChurnFigure } from './shard-churn-figure.js';
import { steadyStateFigure } from './steady-state-figure.js';
import { warmStartFigures } from './warm-start-figures.js';
import { warmthFigure } from './warmth-figure.js';
import { warmthSpreadFigure } from './warmth-spread-figure.js';
import { warmthSpreadCompileFigure, warmthSpreadSleepFigure } from './warmth-spread-rungs.js';
import { warmPageCacheFigure } from './warm-page-cache-figure.js';
import { gangFenceFigure } from './gang-fence-figure.js';
import { bigNodeFigure } from './big-node-figure.js';
import { adapterSetFigure } from './adapter-set-figure.js';

export function benchFigures(rows: BenchRow[], notes: string[], quick: boolean): Record<string, () => Promise<void>> {
  const FIGURES: Record<string, () => Promise<void>> = {
    nvml: () => nvmlFigures(rows, quick),
    '1': () => coldStartFigure(rows, quick),
    '2': () => adoptedReadyFigure(rows),
    '3': () => deathReportFigure(rows, notes, quick),
    '4': () => sigtermExitFigure(rows),
    '5': () => steadyStateFigure(rows, notes, quick),
    '6': () => ctlLogsFigure(rows, quick),
    '7': () => logThroughputFigure(rows, notes, quick),
    '8': () => shardChurnFigure(rows, notes, quick),
    '9': () => discoverFigure(rows),
    '10': () => unitDeathFigure(rows),
  };
  FIGURES.fleet = () => fleetFigure(rows, notes);
  FIGURES.pidfd = () => pidfdFigure(rows, quick);
  FIGURES.floor = () => floorFigures(rows, notes, quick);
  FIGURES['11'] = () => readinessFigure(rows, notes, quick);
  FIGURES['12'] = () => stopDrainFigure(rows, notes, quick);
  FIGURES['13'] = () => readyAfterAnswerFigure(rows, notes, quick);
  FIGURES['14'] = () => warmStartFigures(rows, notes, quick, 'starts');
  FIGURES['14d'] = () => warmthFigure(rows, notes);
  // Whether each rung's published P90 holds for the next starts (issue 51).
  FIGURES['14d-spread'] = () => warmthSpreadFigure(rows, notes, quick);
  // The same for the wake rungs (sleeping-l1, sleeping-l2) and the +compile ones.
  FIGURES['14d-spread-sleep'] = () => warmthSpreadSleepFigure(rows, notes, quick);
  FIGURES['14d-spread-compile'] = () => warmthSpreadCompileFigure(rows, notes, quick);
  // The pull beside curl, and the warm beside cat (issue 52, items 1 and 2).
  FIGURES['14b'] = () => warmStartFigures(rows, notes, quick, 'pull');
  FIGURES['14e'] = () => warmPageCacheFigure(rows, notes, quick);
  FIGURES['15'] = () => gangFenceFigure(rows, notes, quick);
  FIGURES['16'] = () => bigNodeFigure(rows, notes, quick);
  // A desired set of LoRA adapters to every one proven, beside the engine's own load calls (issue 53).
  FIGURES['17'] = () => adapterSetFigure(rows, notes, quick);
  return FIGURES;
}
