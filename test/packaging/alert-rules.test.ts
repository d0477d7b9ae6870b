import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ensurePromtool, promtool } from '../helpers/promtool.js';
import { REPO_ROOT } from '../helpers/run-cli.js';

/*
 * The alert rules the package ships (packaging/alerts.yaml, installed as
 * /usr/share/llmgw/alerts.yaml), proven with Prometheus's own promtool
 * (issue 49 item 2): `promtool check rules`, and `promtool test rules` on
 * test/packaging/alert-rules.promtool.yaml, where every rule has a case that
 * fires and one that must not (a first GPU fault, an operator's clear, a
 * crash about to be replaced, an agent down, ...).
 */

const RULES = join(REPO_ROOT, 'packaging/alerts.yaml');
const CASES = join(REPO_ROOT, 'test/packaging/alert-rules.promtool.yaml');

interface RuleFile {
  groups: { name: string; rules: { alert: string; expr: string }[] }[];
}
interface CaseFile {
  rule_files: string[];
  tests: { name: string; alert_rule_test: { alertname: string; exp_alerts: unknown[] | null }[] }[];
}

const rules = parse(readFileSync(RULES, 'utf8')) as RuleFile;
const alertNames = rules.groups.flatMap((g) => g.rules.map((r) => r.alert));
const scratch = mkdtempSync(join(tmpdir(), 'llmgw-alerts-'));

beforeAll(async () => {
  await ensurePromtool();
}, 600_000);

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('the shipped alert rules, under promtool', () => {
  it('pass `promtool check rules`', async () => {
    const r = await promtool(['check', 'rules', RULES]);
    expect(r.exitCode, r.output).toBe(0);
    expect(r.output).toContain(`SUCCESS: ${alertNames.length} rules found`);
  });

  it('pass `promtool test rules`, with a firing case and a quiet case for every rule', async () => {
    const cases = parse(readFileSync(CASES, 'utf8')) as CaseFile;
    const checks = cases.tests.flatMap((t) => t.alert_rule_test);
    for (const name of alertNames) {
      const mine = checks.filter((c) => c.alertname === name);
      expect(mine.some((c) => (c.exp_alerts ?? []).length > 0), `${name} has a case where it fires`).toBe(true);
      expect(mine.some((c) => (c.exp_alerts ?? []).length === 0), `${name} has a case where it must not fire`).toBe(true);
    }
    expect(checks.filter((c) => !alertNames.includes(c.alertname))).toEqual([]);
    const r = await promtool(['test', 'rules', CASES]);
    expect(r.exitCode, r.output).toBe(0);
    expect(r.output).toContain('SUCCESS');
  });

  it('fail those cases with the README rules they replace: the FAILED rule paged per generation and for a crash about to be replaced, the GPU rule on an operator clear', async () => {
    // The rules as README gave them before walkthrough 4 (O2, O11); the cases must catch each.
    const old: Record<string, { expr: string; for?: string }> = {
      LlmgwShardFailedNotReplaced: { expr: 'llmgw_shard_state{state="FAILED"} == 1 unless on (replica) llmgw_shard_state{state=~"STARTING|READY|UNHEALTHY|DRAINING|SLEEPING"} == 1' },
      LlmgwGpuFaultEvent: { expr: 'increase(llmgw_gpu_events_total{kind!="cleared"}[10m]) > 0' },
    };
    const oldRules: RuleFile = {
      groups: rules.groups.map((g) => ({
        ...g,
        rules: g.rules.map((r) => {
          const o = old[r.alert];
          if (!o) return r;
          const { for: _for, ...rest } = r as typeof r & { for?: string };
          return { ...rest, expr: o.expr };
        }),
      })),
    };
    writeFileSync(join(scratch, 'old-alerts.yaml'), JSON.stringify(oldRules));
    const cases = parse(readFileSync(CASES, 'utf8')) as CaseFile;
    writeFileSync(join(scratch, 'cases.yaml'), JSON.stringify({ ...cases, rule_files: ['old-alerts.yaml'] }));
    const r = await promtool(['test', 'rules', join(scratch, 'cases.yaml')]);
    expect(r.exitCode).toBe(1);
    const failedCases = [...r.output.matchAll(/^\s*name: (.*),\s*\n\s*alertname: (\w+)/gm)].map((m) => `${m[1]} / ${m[2]}`);
    expect(new Set(failedCases)).toEqual(
      new Set([
        'crash loop, one alert per replica / LlmgwShardFailedNotReplaced',
        'a crash about to be replaced / LlmgwShardFailedNotReplaced',
        'a first gpu fault, then an operator clear / LlmgwGpuFaultEvent',
      ]),
    );
  });

  it('are the ones docs/metrics-alerts.md lists, each by name, with the file they live in', () => {
    const readme = readFileSync(join(REPO_ROOT, 'docs/metrics-alerts.md'), 'utf8');
    expect(readme).toContain('/usr/share/llmgw/alerts.yaml');
    for (const name of alertNames) expect(readme, name).toContain(`\`${name}\``);
  });
});
