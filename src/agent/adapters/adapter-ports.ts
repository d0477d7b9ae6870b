/*
 * What the reconciler needs of the engine and of the store, as plain
 * functions: the engine's adapter API through the generic client
 * (engines/adapter-client.ts) and the store's adapters
 * (models/adapters/resolve-adapter.ts), bound to one shard by
 * shard-adapter-ports.ts. Tests give plain objects.
 */

import type { AdapterConfigFeatures } from '../../models/adapters/adapter-files.js';

/** An adapter as the store holds it (models/adapters/resolve-adapter.ts StoreAdapter). */
export interface ResolvedAdapter {
  repo: string;
  revision: string;
  commit: string;
  /** What the engine is given as lora_path. */
  dir: string;
  /** The store's content digest of its files: its identity. */
  digest: string;
  /** adapter_config.json base_model_name_or_path. */
  baseModel: string;
  /** adapter_config.json r. */
  rank: number;
  bytes: number;
  /** adapter_config.json's fields an engine may refuse (use_dora, modules_to_save, bias); absent: not known, the engine decides. */
  features?: AdapterConfigFeatures;
}

/** The engine's adapter API, bound to one shard's engine. */
export interface AdapterEngineCalls {
  load(name: string, dir: string, opts: { pinned?: boolean; signal?: AbortSignal }): Promise<void>;
  unload(name: string, opts: { signal?: AbortSignal }): Promise<void>;
  /** The adapter names the engine serves now. */
  list(opts: { signal?: AbortSignal }): Promise<string[]>;
  /** Requests running and waiting per adapter name; undefined when the engine does not say. */
  inFlight(opts: { signal?: AbortSignal }): Promise<ReadonlyMap<string, { running: number; waiting: number }> | undefined>;
}

/** The node's store, for adapters. */
export interface AdapterStoreCalls {
  /** Throws a one-line error when not in the store, incomplete, or not an adapter. */
  resolve(repo: string, revision: string): Promise<ResolvedAdapter>;
  /** Pulls the adapter repo into the store; throws the pull's one-line failure. */
  pull(repo: string, revision: string, signal: AbortSignal): Promise<void>;
  /** Keeps the repo in the store while `holder` (the shard) has it loaded. */
  pin(repo: string, holder: string): Promise<void>;
  unpin(repo: string, holder: string): Promise<void>;
}

/** The engine's error for a refused call (engines/adapter-client.ts AdapterCallError): its own words when it said any. */
export function engineReasonOf(err: unknown): string {
  const e = err as { engineReason?: unknown; message?: unknown };
  if (typeof e?.engineReason === 'string' && e.engineReason !== '') return e.engineReason;
  return typeof e?.message === 'string' ? e.message : String(err);
}
