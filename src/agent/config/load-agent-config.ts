import { readFileSync, accessSync, constants } from 'node:fs';
import { isIP } from 'node:net';
import { LineCounter, parseDocument, isMap, isSeq, isScalar, type Node, type YAMLMap } from 'yaml';
import { configError, errnoCode } from '../../lib/errors.js';
import { formatDuration, parseDuration, parseByteSize } from '../../lib/duration.js';
import { MIN_STOP_GRACE_MS } from '../engines/shutdown-timeout.js';
import { nearestName } from '../../lib/nearest-name.js';
import { checkUnitProperties } from '../../lib/systemd/allowed-unit-properties.js';
import { CONFIG_KEYS, DEFAULT_CONFIG_PATH, SECTIONS, envNames, type KeySpec } from './config-keys.js';
import { defaultEngineConfig } from './default-engine-config.js';
import { ENV_PATTERN } from './env-allowlist.js';
import { findUser } from './find-user.js';
import {
  ENGINE_NAMES,
  tlsEnabled,
  type AgentConfig,
  type EngineConfig,
  type EngineName,
  type FabricAttachmentConfig,
} from './agent-config.js';

/** Where an effective value came from, for `--print-config` and error messages. */
export type ValueSource =
  | { kind: 'default' }
  | { kind: 'file'; path: string; line: number }
  | { kind: 'env'; name: string }
  | { kind: 'flag'; name: string };

export interface LoadConfigOptions {
  /** The --config flag; DEFAULT_CONFIG_PATH when absent. */
  configPath?: string;
  env?: NodeJS.ProcessEnv;
  /** Flag values keyed by config key ("supervisor.state_dir"), undefined when not given. */
  flags?: Readonly<Record<string, string | undefined>>;
}

export interface LoadedConfig {
  config: AgentConfig;
  /** Effective source of every key. */
  sources: ReadonlyMap<string, ValueSource>;
  /** The raw (YAML-spelt) effective value of every key, for display. */
  values: ReadonlyMap<string, unknown>;
  path: string;
  fileFound: boolean;
}

interface RawValue {
  value: unknown;
  source: ValueSource;
}

const SPEC_BY_KEY = new Map(CONFIG_KEYS.map((s) => [s.key, s]));

export function describeSource(source: ValueSource): string {
  switch (source.kind) {
    case 'default':
      return 'default';
    case 'file':
      return `${source.path}:${source.line}`;
    case 'env':
      return `env ${source.name}`;
    case 'flag':
      return `flag --${source.name}`;
  }
}

/**
 * Loads the agent's configuration: defaults, then the YAML file, then LLMGW_*
 * environment variables, then flags. Every problem is a configuration error
 * (exit 78) whose one line names the key and where the bad value came from.
 */
export function loadAgentConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const path = options.configPath ?? DEFAULT_CONFIG_PATH;
  const env = options.env ?? process.env;
  const raw = new Map<string, RawValue>();

  for (const spec of CONFIG_KEYS) {
    if (spec.default !== undefined) raw.set(spec.key, { value: spec.default, source: { kind: 'default' } });
  }

  const fileFound = readConfigFile(path, options.configPath !== undefined, raw);

  for (const spec of CONFIG_KEYS) {
    for (const name of envNames(spec)) {
      const v = env[name];
      if (v !== undefined && v !== '') {
        raw.set(spec.key, { value: v, source: { kind: 'env', name } });
        break;
      }
    }
  }

  for (const [key, v] of Object.entries(options.flags ?? {})) {
    const spec = SPEC_BY_KEY.get(key);
    if (!spec) throw new Error(`internal: flag for unknown config key ${key}`);
    if (v !== undefined) raw.set(key, { value: v, source: { kind: 'flag', name: spec.flag ?? key } });
  }

  const where = (key: string) => {
    const r = raw.get(key);
    return r ? describeSource(r.source) : path;
  };

  for (const spec of CONFIG_KEYS) {
    if (!spec.required) continue;
    const r = raw.get(spec.key);
    if (r === undefined || r.value === '' || r.value === null) {
      const ways = [fileFound ? path : `${path} (not found)`, envNames(spec)[0]];
      if (spec.flag) ways.push(`--${spec.flag}`);
      throw configError(`${spec.key} is required (${fileFound ? path : `set it in ${ways.join(', ')}`})`);
    }
  }

  const parsed = new Map<string, unknown>();
  for (const spec of CONFIG_KEYS) {
    const r = raw.get(spec.key);
    parsed.set(spec.key, r === undefined ? undefined : parseValue(spec, r));
  }

  const config = assemble(parsed);
  checkCrossKeys(config, where);

  const sources = new Map<string, ValueSource>();
  const values = new Map<string, unknown>();
  for (const [key, r] of raw) {
    sources.set(key, r.source);
    values.set(key, r.value);
  }
  return { config, sources, values, path, fileFound };
}

function readConfigFile(path: string, explicit: boolean, raw: Map<string, RawValue>): boolean {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = errnoCode(err);
    // Without --config, a missing default file is fine: env and flags may say it all.
    if (code === 'ENOENT' && !explicit) return false;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'it is a directory' : String(err);
    throw configError(`cannot read config ${path}: ${why}`, { cause: err });
  }

  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
  const first = doc.errors[0];
  if (first) {
    const line = first.linePos?.[0]?.line ?? lineOf(lineCounter, first.pos[0]);
    const what = first.message.split('\n')[0];
    throw configError(`cannot parse config ${path}:${line}: ${what}`);
  }
  const root = doc.contents;
  if (root === null || (isScalar(root) && (root.value === null || root.value === ''))) return true;
  if (!isMap(root)) {
    throw configError(`config ${path} must be a map of keys (node_id: ..., server: ...), not a ${describeNode(root)}`);
  }

  const known = CONFIG_KEYS.map((s) => s.key);
  const visit = (map: YAMLMap, prefix: string) => {
    for (const pair of map.items) {
      const keyNode = pair.key as Node | null;
      const name = isScalar(keyNode) ? String(keyNode.value) : String(keyNode);
      const full = prefix + name;
      const line = lineOf(lineCounter, keyNode?.range?.[0] ?? 0);
      const valueNode = pair.value as Node | null;
      if (prefix === '' && (SECTIONS as readonly string[]).includes(name)) {
        if (valueNode === null || (isScalar(valueNode) && valueNode.value === null)) continue;
        if (!isMap(valueNode)) {
          throw configError(`${name} must be a map of keys, not a ${describeNode(valueNode)} (${path}:${line})`);
        }
        visit(valueNode, `${name}.`);
        continue;
      }
      const spec = SPEC_BY_KEY.get(full);
      if (!spec) {
        const guess = nearestKey(full, name, known);
        throw configError(`unknown key ${full} (${path}:${line})${guess ? `; did you mean ${guess}?` : ''}`);
      }
      const value = valueNode === null ? null : valueNode.toJSON();
      raw.set(full, { value, source: { kind: 'file', path, line } });
    }
  };
  visit(root, '');
  return true;
}

/**
 * The known key a misspelt one most likely meant: by full path first
 * ("supervisor.stop_grase"), then by its last part, so a key written at the
 * wrong level ("state_dir") still finds "supervisor.state_dir".
 */
function nearestKey(full: string, name: string, known: readonly string[]): string | undefined {
  const direct = nearestName(full, known);
  if (direct) return direct;
  const byLast = nearestName(name, known.map((k) => k.slice(k.lastIndexOf('.') + 1)));
  return byLast === undefined ? undefined : known.find((k) => k.endsWith(`.${byLast}`) || k === byLast);
}

function lineOf(lc: LineCounter, offset: number): number {
  return lc.linePos(offset).line;
}

function describeNode(node: unknown): string {
  if (isSeq(node)) return 'list';
  if (isMap(node)) return 'map';
  if (isScalar(node)) return typeof node.value === 'string' ? 'string' : typeof node.value;
  return 'value';
}

function describeValue(v: unknown): string {
  if (Array.isArray(v)) return 'a list';
  if (v === null) return 'empty';
  if (typeof v === 'object') return 'a map';
  return `${typeof v} ${JSON.stringify(v)}`;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Parses "k=v,k2=v2", the environment spelling of a map. */
function parsePairs(text: string, spec: KeySpec, src: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) throw configError(`${spec.key}: ${JSON.stringify(part)} is not key=value (${src})`);
    out[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  return out;
}

function parseValue(spec: KeySpec, r: RawValue): unknown {
  const src = describeSource(r.source);
  const v = r.value;
  const fromText = r.source.kind === 'env' || r.source.kind === 'flag' || r.source.kind === 'default';
  const bad = (problem: string) => configError(`${spec.key}: ${problem} (${src})`);

  switch (spec.type) {
    case 'string':
      if (v === null) return '';
      if (typeof v === 'string') return v;
      if (typeof v === 'number') return String(v);
      throw bad(`must be a string, got ${describeValue(v)}`);
    case 'enum': {
      const s = typeof v === 'string' ? v : undefined;
      if (s === undefined || !spec.values?.includes(s)) {
        throw bad(`must be one of ${spec.values?.join(', ')}, got ${describeValue(v)}`);
      }
      return s;
    }
    case 'duration': {
      if (typeof v !== 'string') {
        throw bad(`must be a duration string such as 500ms, 5s or 2m, got ${describeValue(v)}${typeof v === 'number' ? ` (write ${v}s?)` : ''}`);
      }
      const ms = parseDuration(v);
      if (ms === undefined) throw bad(`${JSON.stringify(v)} is not a duration; write it like 500ms, 5s, 2m or 1h`);
      return ms;
    }
    case 'bytes': {
      const n = typeof v === 'string' || typeof v === 'number' ? parseByteSize(v) : undefined;
      if (n === undefined || n <= 0) throw bad(`${describeValue(v)} is not a size; write it like 67108864, 64MiB or 1GiB`);
      return n;
    }
    case 'count': {
      const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v) : Number.NaN;
      if (!Number.isSafeInteger(n) || n < 0) throw bad(`must be a whole number of 0 or more, got ${describeValue(v)}`);
      return n;
    }
    case 'share': {
      // 5% or 0.05: both read naturally, and a bare 5 (meaning percent) is refused rather than read as 500%.
      const m = typeof v === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*%\s*$/.exec(v) : null;
      const n = m ? Number(m[1]) / 100 : typeof v === 'number' || (typeof v === 'string' && fromText && /^\d*\.?\d+$/.test(v)) ? Number(v) : Number.NaN;
      if (!(n >= 0 && n <= 1)) throw bad(`${describeValue(v)} is not a share; write it like 5% or 0.05 (between 0 and 1)`);
      return n;
    }
    case 'bool':
      if (typeof v === 'boolean') return v;
      if (fromText && typeof v === 'string' && /^(true|false|1|0|yes|no)$/i.test(v)) return /^(true|1|yes)$/i.test(v);
      throw bad(`must be true or false, got ${describeValue(v)}`);
    case 'labels': {
      if (v === '' || v === null) return {};
      if (typeof v === 'string' && fromText) return parsePairs(v, spec, src);
      if (!isRecord(v)) throw bad(`must be a map of strings, got ${describeValue(v)}`);
      const out: Record<string, string> = {};
      for (const [k, x] of Object.entries(v)) {
        if (typeof x !== 'string' && typeof x !== 'number' && typeof x !== 'boolean') {
          throw bad(`label ${k} must be a string, got ${describeValue(x)}`);
        }
        out[k] = String(x);
      }
      return out;
    }
    case 'fabrics': {
      if (v === '' || v === null) return [];
      if (typeof v === 'string' && fromText) {
        return Object.entries(parsePairs(v, spec, src)).map(([hca, fabric]) => ({ hca, fabric }));
      }
      if (!Array.isArray(v)) throw bad(`must be a list of {hca, fabric}, got ${describeValue(v)}`);
      return v.map((item, i): FabricAttachmentConfig => {
        if (!isRecord(item) || typeof item.hca !== 'string' || typeof item.fabric !== 'string' || item.hca === '' || item.fabric === '') {
          throw bad(`item ${i} must be {hca: <name>, fabric: <name>}, got ${JSON.stringify(item)}`);
        }
        const extra = Object.keys(item).find((k) => k !== 'hca' && k !== 'fabric');
        if (extra) throw bad(`item ${i} has unknown key ${extra}; only hca and fabric are allowed`);
        return { hca: item.hca, fabric: item.fabric };
      });
    }
    case 'engines':
      if (v === '' || v === null) return {};
      if (!isRecord(v)) throw bad(`must be a map from engine name (${ENGINE_NAMES.join(', ')}) to settings, got ${describeValue(v)}`);
      return parseEngines(v, bad);
  }
}

const ENGINE_KEYS = ['command', 'env', 'extra_args', 'allowed_env', 'user', 'enabled'] as const;

function parseEngines(v: Record<string, unknown>, bad: (p: string) => Error): Partial<Record<EngineName, EngineConfig>> {
  const out: Partial<Record<EngineName, EngineConfig>> = {};
  for (const [name, settings] of Object.entries(v)) {
    if (!(ENGINE_NAMES as readonly string[]).includes(name)) {
      const guess = nearestName(name, ENGINE_NAMES);
      throw bad(`unknown engine ${name}${guess ? `; did you mean ${guess}?` : `; known engines: ${ENGINE_NAMES.join(', ')}`}`);
    }
    const s = settings ?? {};
    if (!isRecord(s)) throw bad(`${name} must be a map of ${ENGINE_KEYS.join(', ')}`);
    const cfg = defaultEngineConfig(name as EngineName);
    for (const [k, x] of Object.entries(s)) {
      if (k === 'command') {
        if (typeof x === 'string') {
          // A string is one executable path, never split: engine commands are
          // argv arrays so that nothing in them is interpreted by a shell.
          if (/\s/.test(x)) throw bad(`${name}.command ${JSON.stringify(x)} looks like a shell string; give an argv list, e.g. [/opt/vllm/bin/vllm, serve]`);
          cfg.command = [x];
        } else if (Array.isArray(x) && x.length > 0 && x.every((a) => typeof a === 'string' && a !== '')) {
          cfg.command = x as string[];
        } else {
          throw bad(`${name}.command must be a non-empty list of strings (argv), got ${describeValue(x)}`);
        }
      } else if (k === 'env') {
        if (!isRecord(x)) throw bad(`${name}.env must be a map of strings, got ${describeValue(x)}`);
        cfg.env = Object.fromEntries(Object.entries(x).map(([ek, ev]) => [ek, String(ev)]));
      } else if (k === 'extra_args') {
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string' || typeof a === 'number')) {
          throw bad(`${name}.extra_args must be a list of strings, got ${describeValue(x)}`);
        }
        cfg.extraArgs = x.map(String);
      } else if (k === 'allowed_env') {
        if (x === null) {
          cfg.allowedEnv = [];
          continue;
        }
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string')) {
          throw bad(`${name}.allowed_env must be a list of variable names or NAME_* prefixes, got ${describeValue(x)}`);
        }
        const wrong = x.find((p) => !ENV_PATTERN.test(p));
        if (wrong !== undefined) {
          throw bad(`${name}.allowed_env: ${JSON.stringify(wrong)} is not a variable name or a NAME_* prefix (only a trailing * is a wildcard)`);
        }
        cfg.allowedEnv = x;
      } else if (k === 'user') {
        if (x === null || x === '') continue;
        if (typeof x !== 'string') throw bad(`${name}.user must be an account name, got ${describeValue(x)}`);
        const user = findUser(x);
        if (!user) throw bad(`${name}.user: no account named ${JSON.stringify(x)} on this node; create it (useradd --system ${x}) or fix the name`);
        cfg.user = user;
      } else if (k === 'enabled') {
        if (typeof x !== 'boolean') throw bad(`${name}.enabled must be true or false, got ${describeValue(x)}`);
        cfg.enabled = x;
      } else {
        const guess = nearestName(k, ENGINE_KEYS);
        throw bad(`unknown key ${name}.${k}${guess ? `; did you mean ${guess}?` : ''}`);
      }
    }
    out[name as EngineName] = cfg;
  }
  return out;
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and localhost: traffic that never leaves this node. */
function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h) || /^(0+:){7}0*1$/.test(h);
  return false;
}

/** "supervisor.stop_grace" (duration) → ["supervisor", "stopGraceMs"]. */
function camelPath(spec: KeySpec): string[] {
  return spec.key.split('.').map((part, i, all) => {
    const camel = part.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    return i === all.length - 1 && spec.type === 'duration' ? `${camel}Ms` : camel;
  });
}

function assemble(parsed: Map<string, unknown>): AgentConfig {
  const out: Record<string, unknown> = {};
  for (const spec of CONFIG_KEYS) {
    const path = camelPath(spec);
    let target = out;
    for (const part of path.slice(0, -1)) {
      target[part] ??= {};
      target = target[part] as Record<string, unknown>;
    }
    target[path[path.length - 1] as string] = parsed.get(spec.key);
  }
  return out as unknown as AgentConfig;
}

/**
 * Rules that span keys. The TLS ones follow the Go agent: a scheme that says
 * plaintext while certificates are configured would leave a cluster believing
 * it has mutual authentication when it has none, so it is refused both ways.
 */
function checkCrossKeys(c: AgentConfig, where: (key: string) => string): void {
  const secure = tlsEnabled(c.tls);
  const server = c.server;
  if (!server.includes('://')) {
    // Guessing the scheme from the TLS settings once turned a typo in tls
    // into a silent plaintext connection; the operator says which it is.
    throw configError(
      `server ${JSON.stringify(server)} has no scheme; write https://${server} (mutual TLS) or http://${server} (plaintext, loopback only unless insecure_plaintext: true) (${where('server')})`,
    );
  }
  let url: URL;
  try {
    url = new URL(server);
    if (url.hostname === '') throw new Error('no host');
  } catch {
    throw configError(`server ${JSON.stringify(server)} is not a valid address; write it like https://control-plane:8443 (${where('server')})`);
  }
  if (url.protocol === 'https:') {
    if (!secure) throw configError(`server is an https:// address but no tls certificates are configured; set tls.cert, tls.key and tls.ca (${where('server')})`);
    if ((c.tls.cert === '') !== (c.tls.key === '')) {
      const missing = c.tls.cert === '' ? 'tls.cert' : 'tls.key';
      throw configError(`${missing} is required with ${missing === 'tls.cert' ? 'tls.key' : 'tls.cert'}: mutual TLS needs both (${where(missing === 'tls.cert' ? 'tls.key' : 'tls.cert')})`);
    }
    // Server-only TLS (a CA alone) is refused: the control plane could not
    // tell this node from any host that knows its address, which is not the
    // mutual TLS the docs promise.
    if (c.tls.cert === '') {
      throw configError(`tls.cert and tls.key are required with an https:// server: the agent authenticates to the control plane with mutual TLS (${where('tls.ca')})`);
    }
  } else if (url.protocol === 'http:') {
    if (secure) throw configError(`tls is configured but server is an http:// address; use https:// (${where('server')})`);
    if (!isLoopbackHost(url.hostname) && !c.insecurePlaintext) {
      // On h2c nothing authenticates the control plane, and it decides what
      // runs as root here: whoever can spoof DNS or ARP on the way owns the node.
      throw configError(
        `server ${server} is plaintext http:// to a host that is not loopback; use https:// with tls, or set insecure_plaintext: true if this network is isolated (${where('server')})`,
      );
    }
  } else {
    throw configError(`server ${JSON.stringify(server)} must be an http:// or https:// address (${where('server')})`);
  }

  if (secure) {
    for (const key of ['tls.cert', 'tls.key', 'tls.ca'] as const) {
      const file = c.tls[key.slice(4) as 'cert' | 'key' | 'ca'];
      if (file === '') continue;
      try {
        accessSync(file, constants.R_OK);
      } catch (err) {
        throw configError(`${key}: cannot read ${file}: ${errnoCode(err) === 'ENOENT' ? 'no such file' : 'permission denied'} (${where(key)})`);
      }
    }
  }

  if (c.reconnectMaxMs < c.reconnectBaseMs) {
    throw configError(`reconnect_max must not be less than reconnect_base (${where('reconnect_max')})`);
  }
  for (const key of ['heartbeat_interval', 'reconnect_base', 'adopt_ready_timeout', 'discovery.interval', 'discovery.timeout', 'supervisor.health_interval'] as const) {
    const spec = SPEC_BY_KEY.get(key) as KeySpec;
    const path = camelPath(spec);
    let v: unknown = c;
    for (const p of path) v = (v as Record<string, unknown>)[p];
    if (v === 0) throw configError(`${key} must be greater than 0 (${where(key)})`);
  }
  // Below it vLLM's --shutdown-timeout would be 0, its default, which aborts
  // in-flight requests instead of draining them.
  if (c.supervisor.stopGraceMs < MIN_STOP_GRACE_MS) {
    throw configError(
      `supervisor.stop_grace ${formatDuration(c.supervisor.stopGraceMs)} leaves an engine no time to drain; set it to at least ${formatDuration(MIN_STOP_GRACE_MS)} (${where('supervisor.stop_grace')})`,
    );
  }
  const badProperty = checkUnitProperties(c.supervisor.unitProperties ?? {});
  if (badProperty) throw configError(`supervisor.unit_properties: ${badProperty} (${where('supervisor.unit_properties')})`);
  const seen = new Set<string>();
  for (const f of c.fabrics) {
    if (seen.has(f.hca)) throw configError(`fabrics: hca ${f.hca} is listed twice (${where('fabrics')})`);
    seen.add(f.hca);
  }
}
