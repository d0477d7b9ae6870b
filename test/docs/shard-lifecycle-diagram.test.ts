import { describe, expect, it } from 'vitest';
import { isTransitionAllowed } from '../../src/agent/supervisor/shard/shard-machine.js';
import { ShardState } from '../../src/gen/llmgw/v1/agent_pb.js';
import { REPORTED_SHARD_STATES, stateName } from '../../src/lib/shard-states.js';
import { section } from '../helpers/doc-pages.js';

/*
 * The lifecycle diagram ("A shard's life" in docs/day-two.md) is the
 * machine's transition table drawn: every edge it draws is allowed, and every
 * allowed transition is drawn, so neither can change without the other.
 */

/** The edges of the mermaid block under "## A shard's life", as "FROM → TO" ([*] is UNSPECIFIED). */
function drawnEdges(): string[] {
  const block = /```mermaid\n([\s\S]*?)```/.exec(section('docs/day-two.md', "A shard's life"))?.[1] ?? '';
  return [...block.matchAll(/^\s*(\[\*\]|[A-Z]+) --> ([A-Z]+):/gm)].map((m) => `${m[1] === '[*]' ? 'UNSPECIFIED' : m[1]} → ${m[2]}`);
}

describe("the docs' shard lifecycle", () => {
  it('draws exactly the transitions the machine allows, each once', () => {
    const states = [ShardState.UNSPECIFIED, ...REPORTED_SHARD_STATES];
    const allowed = states.flatMap((from) => states.filter((to) => isTransitionAllowed(from, to)).map((to) => `${stateName(from)} → ${stateName(to)}`));
    const drawn = drawnEdges();
    expect(drawn.length, 'the diagram has edges').toBeGreaterThan(20);
    expect(new Set(drawn).size, 'no edge drawn twice').toBe(drawn.length);
    expect([...drawn].sort()).toEqual([...allowed].sort());
  });
});
