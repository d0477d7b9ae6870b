import type { Logger } from '../../../lib/logger.js';
import { readEngineVersion } from '../probes/engine-version.js';
import type { SleepFacts } from './shard-machine.js';
import type { StateFileWriter } from './state-file-writer.js';

/**
 * What the agent read of one shard's engine and keeps with it (issue 47
 * item 5): its version, read at READY (engine-version.ts), and the MiB of
 * weights it keeps pinned in host RAM since its first sleep. Both go to the
 * state file, so an agent that adopts the engine keeps them.
 */
export class ShardEngineFacts {
  #version: string | undefined;
  #hostCopyMib: number | undefined;
  #reading: Promise<string | undefined> | undefined;
  /** The sleep an adoption took from the state file alone, and why the engine did not confirm it (adopted-sleep-steps.ts). */
  #unconfirmed: { sleep: SleepFacts; why: string } | undefined;

  constructor(
    private readonly o: { engine: string; baseUrl: string; apiKey: string; stateFile: StateFileWriter; log: Logger; fields: Record<string, string>; pid: number },
    recorded: { engineVersion?: string; hostCopyMib?: number },
  ) {
    this.#version = recorded.engineVersion;
    this.#hostCopyMib = recorded.hostCopyMib;
  }

  /** The engine's leader: whose cgroup and NUMA binding a sleep's host copy is judged by (host-room.ts). */
  get pid(): number {
    return this.o.pid;
  }

  /** The engine's version as last read; undefined before it was read or when it could not be. */
  get version(): string | undefined {
    return this.#version;
  }

  /** MiB the engine keeps pinned in host RAM since its first sleep; undefined before it. */
  get hostCopyMib(): number | undefined {
    return this.#hostCopyMib;
  }

  /**
   * The engine's version: as recorded, or asked now (one ask at a time,
   * shared) and recorded. Undefined when it cannot be read; the reason is
   * logged.
   */
  read(signal: AbortSignal): Promise<string | undefined> {
    if (this.#version !== undefined) return Promise.resolve(this.#version);
    if (!this.o.baseUrl) return Promise.resolve(undefined);
    this.#reading ??= (async () => {
      try {
        const got = await readEngineVersion(this.o.engine, this.o.baseUrl, this.o.apiKey, signal);
        if ('reason' in got) {
          this.o.log.warn({ ...this.o.fields, why: got.reason }, 'the engine\'s version could not be read; sleeps that need it are refused');
          return undefined;
        }
        this.#version = got.version;
        this.o.log.info({ ...this.o.fields, engineVersion: got.version }, 'engine version read');
        await this.o.stateFile.recordFacts({ engineVersion: got.version });
        return got.version;
      } finally {
        this.#reading = undefined;
      }
    })();
    return this.#reading;
  }

  /** The engine now keeps `mib` pinned in host RAM for the rest of its life (EngineSleepApi.hostCopyKept). */
  async hostCopyPinned(mib: number): Promise<void> {
    if (this.#hostCopyMib !== undefined) return;
    this.#hostCopyMib = mib;
    await this.o.stateFile.recordFacts({ hostCopyMib: mib });
  }

  /** The adopted shard's `sleep` is its state file's word alone: `why` the engine did not say. */
  sleepFromRecord(sleep: SleepFacts, why: string): void {
    this.#unconfirmed = { sleep, why };
  }

  /**
   * What Status's note says of the shard's `sleep`: that it is the state
   * file's word, while it is that very sleep (a sleep or wake of this agent
   * makes a new one, and its own word stands); '' otherwise.
   */
  sleepNote(sleep: SleepFacts | undefined): string {
    const u = this.#unconfirmed;
    return sleep !== undefined && sleep === u?.sleep ? `asleep at level ${sleep.level} by its state file only: ${u.why}` : '';
  }
}
