import { Listr } from 'listr2';
import { progressListrOptions } from '../lib/listr-options.js';
import { formatBytes } from '../lib/format-bytes.js';
import { printable } from '../lib/printable.js';
import type { ModelStore } from './model-store-options.js';
import { type PullEvent, type PullRequest, type PullResult, pullModel } from './pull-model.js';
import { PullProgress } from './pull-progress.js';
import { resolveStoreAdapter } from './adapters/resolve-adapter.js';

/** The terminal's progress display is redrawn from progress events at most this often. */
const PROGRESS_DRAW_MS = 100;

export interface RunModelsPullOptions {
  store: ModelStore;
  request: PullRequest;
  signal: AbortSignal;
  /** listr2's renderer on a terminal; 'plain' writes one line per step to stderr; 'silent' (--json) nothing. */
  renderer: 'default' | 'plain' | 'silent';
}

/** `llmgw models pull`: the pull, its progress on stderr, and the line for stdout. */
export async function runModelsPull(o: RunModelsPullOptions): Promise<{ result: PullResult; text: string }> {
  let result: PullResult | undefined;
  if (o.renderer === 'default') {
    await new Listr(
      [
        {
          title: `pull ${o.request.repo}@${o.request.revision}`,
          task: async (_ctx, task) => {
            const shown = new Map<string, string>();
            let drawnAtMs = Number.NEGATIVE_INFINITY;
            const progress = new PullProgress();
            result = await pullModel(o.request, {
              ...o.store,
              signal: o.signal,
              onEvent: (e) => {
                progress.observe(e);
                // A progress event comes with every write (thousands a GiB): the display is redrawn from them at most every PROGRESS_DRAW_MS.
                if (e.kind === 'file-progress') {
                  const now = performance.now();
                  if (now - drawnAtMs < PROGRESS_DRAW_MS) return;
                  drawnAtMs = now;
                }
                const line = describeEvent(e);
                if (e.kind === 'file-progress') shown.set(e.path, `${e.path} ${formatBytes(e.bytes)} / ${formatBytes(e.size)}`);
                else if (e.kind === 'file-done') shown.delete(e.path);
                if (line) task.output = line;
                // The whole first (total, rate, time left), then each file in flight.
                if (shown.size > 0) task.output = [progress.line(), ...shown.values()].join('\n');
              },
            });
            task.title = summary(result);
          },
        },
      ],
      { ...progressListrOptions('default'), exitOnError: true },
    ).run();
  } else {
    const progress = new PullProgress();
    result = await pullModel(o.request, {
      ...o.store,
      signal: o.signal,
      onEvent: (e) => {
        if (o.renderer !== 'plain') return;
        progress.observe(e);
        const line = describeEvent(e) ?? progress.plainLineDue();
        if (line) process.stderr.write(`${line}\n`);
      },
    });
  }
  let r = result as PullResult;
  // An adapter's identity is its content digest, what the agent's adapter set names it by (issue 53).
  if (r.adapter) r = { ...r, adapter: { ...r.adapter, digest: (await resolveStoreAdapter(o.store.layout, r.repo, r.revision)).digest } };
  return { result: r, text: `${summary(r)}\n${r.snapshotPath}` };
}

function summary(r: PullResult): string {
  const parts = [`${r.files} files`, formatBytes(r.bytes), `${formatBytes(r.fetchedBytes)} fetched`];
  if (r.resumedBytes > 0) parts.push(`${formatBytes(r.resumedBytes)} resumed`);
  if (r.mismatches > 0) parts.push(`${r.mismatches} corrupt download(s) refused and fetched again`);
  if (r.evicted.length > 0) parts.push(`evicted ${r.evicted.join(', ')}`);
  const adapter = r.adapter ? `; a LoRA adapter of ${printable(r.adapter.baseModel)}, rank ${r.adapter.rank}${r.adapter.digest ? `, ${r.adapter.digest}` : ''}` : '';
  return `pulled ${r.adapter ? 'adapter ' : ''}${r.repo}@${r.revision} (${r.commit.slice(0, 12)}): ${parts.join(', ')}${adapter}`;
}

/** One line per step for a log or a pipe; progress ticks are left to the terminal display. */
function describeEvent(e: PullEvent): string | undefined {
  switch (e.kind) {
    case 'waiting':
      return `waiting for the pull of process ${e.holderPid ?? '?'} of the same model`;
    case 'plan':
      return `commit ${e.commit}: ${e.files} files, ${formatBytes(e.bytes)}; ${e.fetchFiles} to fetch (${formatBytes(e.fetchBytes)})`;
    case 'evicted':
      return `evicted ${e.repo} (${formatBytes(e.bytes)}) to stay within models.budget`;
    case 'file-start':
      return `fetching ${e.path} (${formatBytes(e.size)})`;
    case 'file-done':
      return `verified ${e.path}${e.resumedFrom > 0 ? ` (resumed at ${formatBytes(e.resumedFrom)})` : ''}${e.mismatches > 0 ? ` after ${e.mismatches} corrupt download(s)` : ''}`;
    case 'file-progress':
      return undefined;
  }
}
