import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromJson, toJsonString } from '@bufbuild/protobuf';
import { type Inventory, InventorySchema } from '../gen/llmgw/v1/agent_pb.js';
import { writeFileAtomic } from '../lib/write-file-atomic.js';

/**
 * The last inventory discovery produced, kept in the state directory so that
 * a restarted agent can register at once instead of after a full hardware
 * scan (nvidia-smi takes most of a second, seconds on a busy node). Adopted
 * engines reach READY sooner, and the fresh inventory follows as an update
 * moments later if anything changed.
 */
export function inventoryCachePath(stateDir: string): string {
  return join(stateDir, 'inventory.json');
}

/**
 * Creates the state directory (0700: state files name pids the agent may
 * kill) when it is missing. Once the supervisor alone created it, with the
 * first shard; a node that never had a shard then had nowhere to cache its
 * inventory, and its next agent start waited for a full scan (6.6 s behind a
 * slow nvidia-smi) before Register. An existing directory is left as it is.
 */
export function ensureStateDir(stateDir: string): void {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
}

/** The cached inventory, or undefined when there is none or it cannot be read. */
export function readInventoryCache(stateDir: string): Inventory | undefined {
  try {
    return fromJson(InventorySchema, JSON.parse(readFileSync(inventoryCachePath(stateDir), 'utf8')), { ignoreUnknownFields: true });
  } catch {
    // A cache is only a head start: anything wrong with it means a full scan.
    return undefined;
  }
}

/** Writes the cache atomically, creating the state directory first if need be. */
export async function writeInventoryCache(stateDir: string, inventory: Inventory): Promise<void> {
  ensureStateDir(stateDir);
  await writeFileAtomic(inventoryCachePath(stateDir), toJsonString(InventorySchema, inventory));
}
