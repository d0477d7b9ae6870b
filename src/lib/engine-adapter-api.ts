/**
 * An engine kind's LoRA adapter API as plain JSON data (like EngineSleepApi):
 * the wing gives it (EngineKind.adapters.api), EngineWatch records it at
 * launch and the state file keeps it, so an adopted engine is driven by the
 * API it was launched with. The client that executes it is
 * agent/engines/adapter-client.ts. The facts are each wing's, with their
 * source lines (engines/vllm/vllm-adapters.ts, engines/sglang/sglang-adapters.ts).
 */
export interface EngineAdapterApi {
  /** e.g. vLLM 'POST /v1/load_lora_adapter' body {lora_name, lora_path}; SGLang 'POST /load_lora_adapter' body {lora_name, lora_path, pinned?} */
  load: { path: string; nameField: string; pathField: string; pinnedField?: string };
  unload: { path: string; nameField: string };
  /** How the engine lists what it serves: an OpenAI /v1/models listing (adapters are entries whose `parent`/`root` says so) */
  list: { path: string };
  /** Prometheus metric giving running/waiting adapters by name (vLLM `vllm:lora_requests_info`), if the engine has one. */
  inFlightMetric?: string;
  /** Facts the reconciler needs, each with the engine's source line in a comment where it is defined: */
  unloadFreesSlot: boolean; // false for vLLM if its unload only forgets the frontend name (vLLM #54839)
  evictsLeastRecentlyUsed: boolean; // SGLang beyond --max-loaded-loras
  supportsPinned: boolean;
  /**
   * How a request's `model` names an adapter: 'name', the adapter's own name
   * (vLLM); 'base:name', the served model's name, a colon, then the adapter's
   * (SGLang: a bare adapter name there is not an adapter at all, the base
   * model answers it). Added beside the contract's fields.
   */
  requestModel: 'name' | 'base:name';
  /**
   * A request naming an adapter that was unloaded (or evicted) loads it again
   * by itself (SGLang's tokenizer keeps every name it ever loaded): an unload
   * is undone by the next request naming it. Added beside the contract's fields.
   */
  reloadsOnRequest: boolean;
  /**
   * How the load endpoint answers: 'text', a 200 with a text body and errors
   * as OpenAI error JSON {error: {message}} (vLLM); 'json-success', a JSON
   * {success, error_message} with 200 or 400 (SGLang).
   */
  replies: 'text' | 'json-success';
}

/** What a shard's adapters need from its launch: the profile's limits. */
export interface AdapterLimits {
  maxLoaded: number;
  maxRank: number;
}

/** The model a request names to be answered by adapter `name` of an engine serving `servedName`. */
export function adapterRequestModel(api: EngineAdapterApi, servedName: string, name: string): string {
  return api.requestModel === 'base:name' ? `${servedName}:${name}` : name;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isPath = (v: unknown): v is string => typeof v === 'string' && v.startsWith('/');
const isField = (v: unknown): v is string => typeof v === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(v);

/** The adapter API in a state file's watch; undefined for anything that is not one, every field checked. */
export function parseEngineAdapterApi(raw: unknown): EngineAdapterApi | undefined {
  if (!isRecord(raw) || !isRecord(raw.load) || !isRecord(raw.unload) || !isRecord(raw.list)) return undefined;
  const { load, unload, list } = raw;
  if (!isPath(load.path) || !isField(load.nameField) || !isField(load.pathField)) return undefined;
  if (load.pinnedField !== undefined && !isField(load.pinnedField)) return undefined;
  if (!isPath(unload.path) || !isField(unload.nameField) || !isPath(list.path)) return undefined;
  if (raw.inFlightMetric !== undefined && (typeof raw.inFlightMetric !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(raw.inFlightMetric))) return undefined;
  const flags = ['unloadFreesSlot', 'evictsLeastRecentlyUsed', 'supportsPinned', 'reloadsOnRequest'] as const;
  if (!flags.every((f) => typeof raw[f] === 'boolean')) return undefined;
  if (raw.requestModel !== 'name' && raw.requestModel !== 'base:name') return undefined;
  if (raw.replies !== 'text' && raw.replies !== 'json-success') return undefined;
  return {
    load: { path: load.path, nameField: load.nameField, pathField: load.pathField, ...(load.pinnedField !== undefined ? { pinnedField: load.pinnedField as string } : {}) },
    unload: { path: unload.path, nameField: unload.nameField },
    list: { path: list.path },
    ...(raw.inFlightMetric !== undefined ? { inFlightMetric: raw.inFlightMetric as string } : {}),
    unloadFreesSlot: raw.unloadFreesSlot as boolean,
    evictsLeastRecentlyUsed: raw.evictsLeastRecentlyUsed as boolean,
    supportsPinned: raw.supportsPinned as boolean,
    requestModel: raw.requestModel,
    reloadsOnRequest: raw.reloadsOnRequest as boolean,
    replies: raw.replies,
  };
}
