import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readDoc, section } from '../helpers/doc-pages.js';
import { REPO_ROOT } from '../helpers/run-cli.js';

/*
 * The reference parts of the docs list everything there is, so that a new
 * command, metric or proto field fails here until it is documented
 * (walkthrough 4, O21: the README's command table had left out half the commands).
 */

/** Every command the built CLI has, as an operator types it ("ctl gpu clear"). */
function commands(): string[] {
  const manifest = JSON.parse(readFileSync(join(REPO_ROOT, 'oclif.manifest.json'), 'utf8')) as { commands: Record<string, unknown> };
  return Object.keys(manifest.commands).map((id) => id.replaceAll(':', ' '));
}

/** The commands a table names as `llmgw <command>`. */
function tabled(markdown: string): string[] {
  return [...markdown.matchAll(/`llmgw ([a-z -]+?)`/g)].map((m) => m[1] as string);
}

/** Every metric family the agent registers: `name: 'llmgw_…'` in src/agent. */
function metricFamilies(dir = join(REPO_ROOT, 'src/agent')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return metricFamilies(path);
    if (!e.name.endsWith('.ts')) return [];
    return [...readFileSync(path, 'utf8').matchAll(/name: '(llmgw_[a-z_]+)'/g)].map((m) => m[1] as string);
  });
}

interface ProtoType {
  kind: 'message' | 'enum';
  name: string;
  /** Field names of a message (oneof members included), value names of an enum. */
  members: string[];
}

/** The top-level messages and enums of a .proto file, with their fields or values. */
function protoTypes(proto: string): ProtoType[] {
  const types: ProtoType[] = [];
  let current: ProtoType | undefined;
  let depth = 0;
  for (const raw of proto.split('\n')) {
    const line = raw.replace(/\/\/.*$/, '');
    const open = /^(message|enum) (\w+) \{/.exec(line);
    if (open && depth === 0) {
      current = { kind: open[1] as ProtoType['kind'], name: open[2] as string, members: [] };
      types.push(current);
    } else if (current) {
      const member = current.kind === 'enum' ? /^\s*(\w+)\s*=\s*\d+;/.exec(line) : /^\s*(?:repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+;/.exec(line);
      if (member) current.members.push(member[1] as string);
    }
    depth += (line.match(/\{/g) ?? []).length - (line.match(/\}/g) ?? []).length;
    if (depth === 0) current = undefined;
  }
  return types;
}

/**
 * What a contract page leaves out of the proto's types. A message is documented
 * under a heading that names it, or in a paragraph that starts with its name
 * (`` `MigDevice`: … ``), each field there as `` `field` ``; an enum's values
 * anywhere on the page.
 */
function undocumented(types: ProtoType[], page: string): string[] {
  const paragraphs = page.split(/\n\s*\n/);
  const headingOf = (name: string) => page.split('\n').find((l) => /^#+ /.test(l) && l.includes(`\`${name}\``));
  return types.flatMap((t) => {
    let text: string | undefined;
    if (t.kind === 'enum') text = page.includes(`\`${t.name}\``) ? page : undefined;
    else {
      const heading = headingOf(t.name);
      text = heading ? section('control-plane', heading.replace(/^#+ /, ''), page) : paragraphs.find((p) => p.trimStart().startsWith(`\`${t.name}\`:`) || p.includes(`\n\`${t.name}\`:`));
    }
    if (!text) return [`${t.kind} ${t.name}`];
    return t.members.filter((m) => !text.includes(`\`${m}\``)).map((m) => `${t.name}.${m}`);
  });
}

describe('the docs list everything there is', () => {
  it("the README's command table names every command the CLI has", () => {
    const all = commands();
    expect(all).toContain('ctl gpu clear');
    const table = section('README.md', 'Commands');
    expect(all.filter((c) => !tabled(table).includes(c))).toEqual([]);
    expect(tabled(table).filter((c) => !all.includes(c)), 'no command the CLI lacks').toEqual([]);
  });

  it('docs/metrics-alerts.md lists every metric family the agent registers', () => {
    const families = metricFamilies();
    expect(families).toContain('llmgw_gpu_healthy');
    const page = section('docs/metrics-alerts.md', 'Metrics');
    expect([...new Set(families)].filter((f) => !page.includes(`\`${f}\``))).toEqual([]);
  });

  it('docs/control-plane.md documents every message, field and enum value of agent.proto', () => {
    const types = protoTypes(readFileSync(join(REPO_ROOT, 'proto/llmgw/v1/agent.proto'), 'utf8'));
    expect(types.find((t) => t.name === 'StartShard')?.members).toContain('gang');
    expect(types.find((t) => t.name === 'ShardState')?.members).toContain('SHARD_STATE_SLEEPING');
    expect(types.length).toBeGreaterThan(30);
    expect(undocumented(types, readDoc('docs/control-plane.md'))).toEqual([]);
  });

  it('would name a field, a message or an enum the page leaves out, and pass one it documents', () => {
    const types = protoTypes('message A {\n  int32 one = 1;\n  oneof msg {\n    B two = 2;\n  }\n}\nmessage B {\n  repeated string three = 1;\n  map<string, string> four = 2;\n}\nenum E {\n  E_X = 0;\n}\nmessage C {\n  string five = 1;\n}\n');
    expect(types).toEqual([
      { kind: 'message', name: 'A', members: ['one', 'two'] },
      { kind: 'message', name: 'B', members: ['three', 'four'] },
      { kind: 'enum', name: 'E', members: ['E_X'] },
      { kind: 'message', name: 'C', members: ['five'] },
    ]);
    const page = '# Contract\n\n### `A`\n\n`one` and `two`, not `three`\n\n## Other\n\n`B`: `three` only.\n';
    expect(undocumented(types, page)).toEqual(['B.four', 'enum E', 'message C']);
  });
});
