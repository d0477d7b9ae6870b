import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument, isMap, isSeq, isScalar, type Node, type YAMLMap } from 'yaml';
import { describeErrno, isNotFound } from '../../lib/errno.js';
import { configError } from '../../lib/errors.js';
import { nearestName } from '../../lib/nearest-name.js';
import { CONFIG_KEYS, SECTIONS, SPEC_BY_KEY, SUBSECTIONS } from './config-keys.js';
import type { RawValue } from './value-source.js';

/**
 * Reads the YAML config file into `raw`, each value with the file:line it was
 * written on. An unknown key is refused, with the known key it most likely
 * meant. Returns whether the file was there.
 */
export function readConfigFile(path: string, explicit: boolean, raw: Map<string, RawValue>): boolean {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    // Without --config, a missing default file is fine: env and flags may say it all.
    if (isNotFound(err) && !explicit) return false;
    throw configError(`cannot read config ${path}: ${describeErrno(err)}`, { cause: err });
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
      if ((prefix === '' && (SECTIONS as readonly string[]).includes(name)) || (SUBSECTIONS as readonly string[]).includes(full)) {
        if (valueNode === null || (isScalar(valueNode) && valueNode.value === null)) continue;
        if (!isMap(valueNode)) {
          throw configError(`${full} must be a map of keys, not a ${describeNode(valueNode)} (${path}:${line})`);
        }
        visit(valueNode, `${full}.`);
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
