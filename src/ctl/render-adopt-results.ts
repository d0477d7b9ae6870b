import type { AdoptResultJson } from '../gen/llmgw/v1/admin_pb.js';
import { printable } from '../lib/printable.js';
import { enumLabel } from './enum-label.js';

const VERBS: Record<string, string> = {
  ADOPTED: 'adopted (supervised again; settling to READY)',
  KILLED: 'killed (alive but unidentifiable)',
  CLEANED: 'cleaned (its process was gone; state removed)',
  ALREADY_SUPERVISED: 'already supervised',
  ERROR: 'error',
};

/** One line per shard the state directory describes, then a count. */
export function renderAdoptResults(results: readonly AdoptResultJson[]): string {
  if (results.length === 0) return 'no engines found in the state directory';
  const lines = results.map((r) => {
    const outcome = enumLabel(r.outcome, 'ADOPT_OUTCOME_');
    const pid = r.pid ? ` pid ${r.pid}` : '';
    const why = r.reason ? `: ${r.reason}` : '';
    return printable(`${r.shardId || '(scan)'}${pid}: ${VERBS[outcome] ?? outcome.toLowerCase()}${why}`);
  });
  return lines.join('\n');
}
