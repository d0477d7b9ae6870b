import { configError } from '../../lib/errors.js';
import { parseDuration, parseByteSize } from '../../lib/duration.js';
import type { KeySpec } from './config-keys.js';
import { ENGINE_NAMES } from '../../lib/engine-names.js';
import type { FabricAttachmentConfig } from './agent-config.js';
import { describeValue } from '../../lib/describe-value.js';
import { isRecord } from './is-record.js';
import { parseEnginesConfig } from './parse-engines-config.js';
import { describeSource, type RawValue } from './value-source.js';

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

/**
 * One key's value, checked and converted to its type. Values from the
 * environment, flags and defaults are text, so they may spell a bool, share,
 * map or list as text; the same text in YAML is refused as the wrong type.
 */
export function parseConfigValue(spec: KeySpec, r: RawValue): unknown {
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
      // A size whose default is empty is optional (models.budget, models.bandwidth): empty leaves it unset.
      if (spec.default === '' && (v === '' || v === null)) return undefined;
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
      return parseEnginesConfig(v, bad);
  }
}
