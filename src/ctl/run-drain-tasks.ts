import { Listr } from 'listr2';
import { progressListrOptions } from '../lib/listr-options.js';
import type { DrainResponse } from '../gen/llmgw/v1/admin_pb.js';
import { describeDrainProgress, isDrainDone } from './describe-drain-progress.js';

/** default: spinners (a terminal); simple: one plain line per change, no glyphs, for pipes and logs. */
export type DrainRenderer = 'default' | 'simple';

/** The drain stream as it arrives: the latest message, change notices, and the end of the stream. */
export interface DrainWatch {
  latest(): DrainResponse;
  subscribe(onChange: () => void): () => void;
  /** Resolves when the stream ends, rejects when it fails. */
  ended: Promise<void>;
}

/**
 * One listr2 task per draining shard, its title the in-flight count, done at
 * zero, failed when the agent says the timeout passed. Progress goes to
 * stderr; stdout keeps the summary the command prints after.
 */
export async function runDrainTasks(watch: DrainWatch, renderer: DrainRenderer, say: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): Promise<void> {
  if (renderer === 'simple') return runPlain(watch, say);
  const tasks = new Listr(
    watch.latest().shards.map((initial) => ({
      title: `${initial.shardId}: ${describeDrainProgress(initial)}`,
      task: (_ctx: unknown, task: { title: string; output: string }) =>
        new Promise<void>((resolve, reject) => {
          const id = initial.shardId;
          let shown = '';
          const check = () => {
            const r = watch.latest();
            const p = r.shards.find((s) => s.shardId === id) ?? initial;
            const text = `${id}: ${describeDrainProgress(p)}`;
            if (text !== shown) {
              // The title is what a terminal shows; output is what the plain renderer prints, once per change.
              task.title = text;
              task.output = text;
              shown = text;
            }
            if (isDrainDone(p)) {
              unsubscribe();
              resolve();
            } else if (r.timedOut) {
              unsubscribe();
              reject(new Error(`${text} at the timeout`));
            }
          };
          const unsubscribe = watch.subscribe(check);
          watch.ended.then(
            () => {
              check();
              unsubscribe();
              reject(new Error(`${id}: the agent ended the drain before it finished`));
            },
            (err: unknown) => {
              unsubscribe();
              reject(err);
            },
          );
          check();
        }),
    })),
    { ...progressListrOptions(renderer), concurrent: true, exitOnError: false },
  );
  await tasks.run();
}

/**
 * Pipes and logs: one line per shard whenever its progress changes, and
 * nothing else. listr2's simple renderer put `❯ › ✔` before each (glyphs a
 * log collector stores as noise, new-operator walkthrough 2, row 22), as
 * `dev up` already avoids. Ends when every shard is drained, the agent says
 * the timeout passed, or the stream ends; a failed stream is the caller's
 * to report (it awaits `ended` itself), as with the spinners.
 */
async function runPlain(watch: DrainWatch, say: (line: string) => void): Promise<void> {
  const shown = new Map<string, string>();
  await new Promise<void>((resolve) => {
    const check = () => {
      const r = watch.latest();
      for (const p of r.shards) {
        const text = `${p.shardId}: ${describeDrainProgress(p)}`;
        if (shown.get(p.shardId) === text) continue;
        shown.set(p.shardId, text);
        say(r.timedOut && !isDrainDone(p) ? `${text} at the timeout` : text);
      }
      if (r.timedOut || r.shards.every(isDrainDone)) finish();
    };
    const unsubscribe = watch.subscribe(check);
    const finish = () => {
      unsubscribe();
      resolve();
    };
    watch.ended.then(
      () => {
        check();
        finish();
      },
      () => finish(),
    );
    check();
  });
}
