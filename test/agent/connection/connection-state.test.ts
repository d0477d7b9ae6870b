import { describe, expect, it } from 'vitest';
import { type ConnectionChange, type ConnectionPhase, ConnectionState, nextConnectionStatus, type ConnectionStatus } from '../../../src/agent/connection/connection-state.js';
import { captureLogger } from '../../helpers/capture-logger.js';

const TARGET = { server: 'http://127.0.0.1:8443', protocol: 'connect' };

/** A change that goes to `phase`, with made-up facts for the phases that carry some. */
function changeTo(phase: ConnectionPhase): ConnectionChange {
  switch (phase) {
    case 'connected':
      return { phase, atMs: 1_000 };
    case 'retrying':
      return { phase, attempt: 3, error: 'connection refused', nextAttemptAtMs: 9_000 };
    case 'connecting':
    case 'stopping':
    case 'stopped':
      return { phase };
    case 'starting':
      // Not a change any caller can ask for; the cast is the bug a test must catch.
      return { phase } as unknown as ConnectionChange;
  }
}

function statusIn(phase: ConnectionPhase): ConnectionStatus {
  return { ...TARGET, phase, connectedSinceMs: 500, attempt: 2, nextAttemptAtMs: 700, lastError: 'earlier' };
}

const PHASES: ConnectionPhase[] = ['starting', 'connecting', 'connected', 'retrying', 'stopping', 'stopped'];

/** Written out here, not read from the module: the test must fail if the table drifts. */
const ALLOWED = new Set([
  'starting→connecting',
  'starting→stopping',
  'connecting→connecting',
  'connecting→connected',
  'connecting→retrying',
  'connecting→stopping',
  'connected→connecting',
  'connected→retrying',
  'connected→stopping',
  'retrying→connecting',
  'retrying→stopping',
  'stopping→stopped',
]);

describe('nextConnectionStatus', () => {
  for (const from of PHASES) {
    for (const to of PHASES) {
      const allowed = ALLOWED.has(`${from}→${to}`);
      it(`${allowed ? 'allows' : 'refuses'} ${from} → ${to}`, () => {
        const step = () => nextConnectionStatus(statusIn(from), changeTo(to));
        if (allowed) expect(step().phase).toBe(to);
        else expect(step).toThrow(`control-plane connection cannot go from ${from} to ${to}`);
      });
    }
  }

  it('connected clears the attempt count and the last error, and records when', () => {
    const s = nextConnectionStatus(statusIn('connecting'), { phase: 'connected', atMs: 42 });
    expect(s).toMatchObject({ phase: 'connected', connectedSinceMs: 42, attempt: 0, lastError: '', nextAttemptAtMs: 0 });
  });

  it('retrying records the attempt, the error and when the next attempt is due, and is no longer connected', () => {
    const s = nextConnectionStatus(statusIn('connected'), { phase: 'retrying', attempt: 4, error: 'reset', nextAttemptAtMs: 123 });
    expect(s).toMatchObject({ phase: 'retrying', connectedSinceMs: 0, attempt: 4, lastError: 'reset', nextAttemptAtMs: 123 });
  });

  it('connecting after a clean close starts the attempt count afresh; after a failure it keeps it', () => {
    expect(nextConnectionStatus(statusIn('connected'), { phase: 'connecting', cleanClose: true })).toMatchObject({ attempt: 0, connectedSinceMs: 0, nextAttemptAtMs: 0 });
    expect(nextConnectionStatus(statusIn('retrying'), { phase: 'connecting' })).toMatchObject({ attempt: 2, lastError: 'earlier', nextAttemptAtMs: 0 });
  });

  it('stopping keeps what the last session said, for ctl status to show', () => {
    expect(nextConnectionStatus(statusIn('connected'), { phase: 'stopping' })).toMatchObject({ connectedSinceMs: 500, lastError: 'earlier', nextAttemptAtMs: 0 });
  });
});

describe('ConnectionState', () => {
  it('starts in starting with nothing attempted', () => {
    const state = new ConnectionState(TARGET, captureLogger().logger);
    expect(state.status()).toEqual({ ...TARGET, phase: 'starting', connectedSinceMs: 0, attempt: 0, nextAttemptAtMs: 0, lastError: '' });
  });

  it('logs every change at info with where it came from and went to', () => {
    const { logger, records } = captureLogger();
    const state = new ConnectionState(TARGET, logger);
    state.transition({ phase: 'connecting' });
    state.transition({ phase: 'retrying', attempt: 1, error: 'connection refused', nextAttemptAtMs: Date.now() + 1000 });
    state.transition({ phase: 'connecting' });
    state.transition({ phase: 'connected', atMs: Date.now() });
    state.transition({ phase: 'stopping' });
    state.transition({ phase: 'stopped' });
    const changes = records.filter((r) => r.msg === 'control-plane connection');
    expect(changes.map((r) => `${r.from}→${r.to}`)).toEqual([
      'starting→connecting',
      'connecting→retrying',
      'retrying→connecting',
      'connecting→connected',
      'connected→stopping',
      'stopping→stopped',
    ]);
    expect(changes.every((r) => r.level === 30 && r.server === TARGET.server)).toBe(true);
    expect(changes[1]?.attempt).toBe(1);
  });

  it('refuses connected → starting, logs nothing for it and keeps its status', () => {
    const { logger, records } = captureLogger();
    const state = new ConnectionState(TARGET, logger);
    state.transition({ phase: 'connecting' });
    state.transition({ phase: 'connected', atMs: 7 });
    const before = state.status();
    const logged = records.length;
    expect(() => state.transition(changeTo('starting'))).toThrow('control-plane connection cannot go from connected to starting');
    expect(state.status()).toEqual(before);
    expect(records.length).toBe(logged);
  });

  it('hands out copies: changing one changes nothing', () => {
    const state = new ConnectionState(TARGET, captureLogger().logger);
    const s = state.status();
    s.phase = 'connected';
    s.attempt = 99;
    expect(state.status()).toMatchObject({ phase: 'starting', attempt: 0 });
  });
});
