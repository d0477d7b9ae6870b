import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { SerialWrites } from '../../lib/files/serial-writes.js';
import { writeFileAtomic } from '../../lib/write-file-atomic.js';

/*
 * The node's adapter names and the bytes each stands for (issue 53): a name
 * loaded anywhere on the node holds its content digest until the last shard
 * unloads it, and a load of other bytes under it is refused. A name reused
 * for new weights is how SGLang evicted the wrong buffer (#8263) and how a
 * router's cache of "which node has tenant X" silently serves the old
 * tenant's weights. Kept in the state directory, so an agent restarted under
 * adopted engines still refuses what they hold.
 */

interface Held {
  digest: string;
  shards: string[];
}

export class AdapterLedger {
  readonly #held = new Map<string, Held>();
  // A failed write: memory holds it; a restarted agent learns names again as it proves what engines list.
  readonly #writes = new SerialWrites();

  constructor(private readonly path: string) {
    try {
      const f = JSON.parse(readFileSync(path, 'utf8')) as { version?: number; names?: Record<string, Held> };
      if (f.version === 1 && f.names && typeof f.names === 'object') {
        for (const [name, h] of Object.entries(f.names)) {
          if (typeof h?.digest === 'string' && Array.isArray(h.shards) && h.shards.every((s) => typeof s === 'string')) this.#held.set(name, { digest: h.digest, shards: [...h.shards] });
        }
      }
    } catch {
      // None yet, or unreadable: names are recorded anew as shards load them.
    }
  }

  /** Why `shard` may not load `digest` under `name`: another shard holds other bytes under it. Undefined when it may. */
  conflict(name: string, digest: string, shard: string): string | undefined {
    const h = this.#held.get(name);
    if (!h || h.digest === digest) return undefined;
    const others = h.shards.filter((s) => s !== shard);
    if (others.length === 0) return undefined;
    return `adapter name ${name} is loaded on shard ${others[0]} with other bytes (${short(h.digest)}, not ${short(digest)}); unload it there first or give these bytes another name`;
  }

  /** `shard` loaded `digest` under `name`. */
  hold(name: string, digest: string, shard: string): Promise<void> {
    const h = this.#held.get(name);
    const shards = h && h.digest === digest ? h.shards.filter((s) => s !== shard) : [];
    this.#held.set(name, { digest, shards: [...shards, shard] });
    return this.save();
  }

  /** `shard` no longer has `name` loaded. */
  release(name: string, shard: string): Promise<void> {
    const h = this.#held.get(name);
    if (!h) return this.#writes.settled();
    h.shards = h.shards.filter((s) => s !== shard);
    if (h.shards.length === 0) this.#held.delete(name);
    return this.save();
  }

  /** `shard`'s engine is gone: every name it held is let go. */
  releaseShard(shard: string): Promise<void> {
    for (const [name, h] of this.#held) {
      h.shards = h.shards.filter((s) => s !== shard);
      if (h.shards.length === 0) this.#held.delete(name);
    }
    return this.save();
  }

  /** The digest held under `name`, if any shard has it loaded. */
  digestOf(name: string): string | undefined {
    return this.#held.get(name)?.digest;
  }

  /** No write starts after this (the agent is going away: names are held in memory only); resolves once the last one asked has ended. */
  close(): Promise<void> {
    return this.#writes.close();
  }

  private save(): Promise<void> {
    const text = `${JSON.stringify({ version: 1, names: Object.fromEntries(this.#held) })}\n`;
    return this.#writes.queue(async () => {
      mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
      await writeFileAtomic(this.path, text);
    });
  }
}

const short = (digest: string) => digest.replace(/^sha256:/, '').slice(0, 12);
