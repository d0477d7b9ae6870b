import { setTimeout as sleep } from 'node:timers/promises';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { type AdminClient, openAdminClient } from '../open-admin-client.js';
import { renderTop } from './render-top.js';
import { TerminalScreen } from './terminal-screen.js';
import { handleTopKeys, type TopKeysState } from './top-keys.js';
import { TopModel } from './top-model.js';

/** Events from before the view opened that it shows at once: enough to see what led here. */
export const TOP_EVENTS_BACKLOG_MS = 10 * 60_000;
/** How long one Status may take before the view says so; an agent busy for longer is news in itself. */
const STATUS_TIMEOUT_MS = 5000;
/** Width of a snapshot when stdout is no terminal (a pipe, a file). */
const SNAPSHOT_WIDTH = 160;

export interface CtlTopOptions {
  socket: string;
  /** Status every this many ms. */
  intervalMs: number;
  /** One snapshot and exit, also on a terminal. */
  once: boolean;
  /** Ctrl-C or SIGTERM from the command (with no terminal to take, the view ends on them). */
  signal: AbortSignal;
  out: NodeJS.WriteStream & { fd: number };
  input: NodeJS.ReadStream;
}

/**
 * `ctl top`: the agent's shards, GPUs and stream, from its admin socket
 * only — Status every interval, and the Events follow for what changes in
 * between, so a transition or a GPU fault shows the moment the agent
 * records it. On a terminal it is a live screen with keys; otherwise (or
 * with once) plain text snapshots.
 */
export async function ctlTop(o: CtlTopOptions): Promise<void> {
  // Before the screen is taken: "the agent is not running" prints as a plain error line.
  const admin = await openAdminClient(o.socket);
  try {
    if (o.once || !o.out.isTTY || !o.input.isTTY) await snapshots(admin, o);
    else await liveScreen(admin, o);
  } finally {
    admin.close();
  }
}

/** Reads Status into the model; what went wrong, as an operator's error, when it failed. */
async function readStatus(admin: AdminClient, model: TopModel, signal: AbortSignal): Promise<unknown> {
  try {
    model.applyStatus(await admin.client.status({}, { signal, timeoutMs: STATUS_TIMEOUT_MS }), Date.now());
    return undefined;
  } catch (err) {
    if (signal.aborted) return undefined;
    const explained = admin.explain(err);
    model.statusError = (explained as Error).message ?? String(err);
    return explained;
  }
}

/** Without a terminal: a frame as text, then (unless once) another each interval until the signal. */
async function snapshots(admin: AdminClient, o: CtlTopOptions): Promise<void> {
  const model = new TopModel();
  const write = (lines: string[]) => o.out.write(`${lines.join('\n')}\n`);
  for (;;) {
    const failed = await readStatus(admin, model, o.signal);
    if (o.signal.aborted) return;
    // The explained error itself, not a new Error of its message: its exit status (69 for a socket that is not the agent's) is kept.
    if (!model.status) throw failed ?? new Error(model.statusError);
    model.events.length = 0;
    try {
      for await (const res of admin.client.events({ since: timestampFromMs(Date.now() - TOP_EVENTS_BACKLOG_MS) }, { signal: o.signal })) {
        for (const e of res.events) model.applyEvent(e);
      }
    } catch {
      model.eventsLive = false;
    }
    write(renderTop(model, { sort: 'shard', filter: '', width: o.out.columns ?? SNAPSHOT_WIDTH, height: 0, nowMs: Date.now() }));
    if (o.once) return;
    try {
      await sleep(o.intervalMs, undefined, { signal: o.signal });
    } catch {
      return;
    }
    o.out.write('\n');
  }
}

async function liveScreen(admin: AdminClient, o: CtlTopOptions): Promise<void> {
  const model = new TopModel();
  const keys: TopKeysState = { sort: 'state', filter: '' };
  const stop = new AbortController();
  const signal = AbortSignal.any([o.signal, stop.signal]);
  const screen = new TerminalScreen(o.out, o.input);
  const draw = () => screen.draw(renderTop(model, { ...keys, width: screen.columns, height: screen.rows, nowMs: Date.now() }));
  const onKey = (chunk: Buffer) => {
    const r = handleTopKeys(keys, chunk.toString('utf8'));
    if (r === 'quit') stop.abort();
    else if (r === 'redraw') draw();
  };
  o.input.on('data', onKey);
  o.out.on('resize', draw);
  try {
    draw();
    // An event cuts the wait short: the tables (a GPU's FAULT, a shard's state) follow it at once, not at the next tick.
    let nap = new AbortController();
    const onEvents = () => {
      draw();
      nap.abort();
    };
    const events = followEvents(admin, model, signal, onEvents, o.intervalMs);
    while (!signal.aborted) {
      await readStatus(admin, model, signal);
      draw();
      if (!nap.signal.aborted) await sleep(o.intervalMs, undefined, { signal: AbortSignal.any([signal, nap.signal]) }).catch(() => {});
      nap = new AbortController();
    }
    await events;
  } finally {
    o.input.off('data', onKey);
    o.out.off('resize', draw);
    screen.restore();
  }
}

/** The Events follow, `onEvents` after each message; opened again after a break (the agent restarting). */
async function followEvents(admin: AdminClient, model: TopModel, signal: AbortSignal, onEvents: () => void, retryMs: number): Promise<void> {
  let sinceMs = Date.now() - TOP_EVENTS_BACKLOG_MS;
  while (!signal.aborted) {
    try {
      const req = { follow: true, since: timestampFromMs(sinceMs) };
      for await (const res of admin.client.events(req, { signal })) {
        model.eventsLive = true;
        for (const e of res.events) model.applyEvent(e);
        onEvents();
      }
    } catch {
      // Shown as "events off" until the follow is open again; Status still refreshes.
    }
    model.eventsLive = false;
    // The next follow starts where this one stopped, by time: a restarted agent's seqs start again at 1.
    sinceMs = Date.now();
    if (signal.aborted) return;
    onEvents();
    await sleep(retryMs, undefined, { signal }).catch(() => {});
  }
}
