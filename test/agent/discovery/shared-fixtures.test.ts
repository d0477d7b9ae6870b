/**
 * Parses every real capture in ../shared/fixtures (outside the repository,
 * never copied into it) with discovery's own parsers. Skipped, with a
 * message, where the folder is absent. LLMGW_SHARED_FIXTURES points
 * elsewhere, e.g. from a git worktree whose parent has no shared/.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseComputeApps } from '../../../src/agent/discovery/parse-compute-apps.js';
import { parseGpuList } from '../../../src/agent/discovery/parse-gpu-list.js';
import { parseIbPortState, parseIbRateGbps, parseLinkLayer } from '../../../src/agent/discovery/parse-ib-port-values.js';
import { parseMib, parseNvidiaCsv } from '../../../src/agent/discovery/parse-nvidia-csv.js';
import { parseQueryGpu } from '../../../src/agent/discovery/parse-query-gpu.js';
import { parseTopoMatrix } from '../../../src/agent/discovery/parse-topo-matrix.js';
import { probeHcas } from '../../../src/agent/discovery/probe-hcas.js';
import { extractTtar } from '../../helpers/extract-ttar.js';
import { REPO_ROOT } from '../../helpers/run-cli.js';

const DIR = process.env.LLMGW_SHARED_FIXTURES || join(REPO_ROOT, '../shared/fixtures');
const present = existsSync(DIR);
if (!present) console.warn(`skipping the shared fixture tests: ${DIR} is absent`);
const files = present ? readdirSync(DIR).sort() : [];
const read = (f: string) => readFileSync(join(DIR, f), 'utf8');
// Made only where the tests run: a file whose tests are all skipped runs no afterAll, and left one in /tmp each run.
const tmp = present ? mkdtempSync(join(tmpdir(), 'llmgw-shared-fixtures-')) : '';
afterAll(() => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The sections of an nvidia_gpu_exporter capture: title → content. */
function captureSections(text: string): Map<string, string> {
  const parts = text.split(/^#{80}\n/m);
  const out = new Map<string, string>();
  for (let i = 1; i + 1 < parts.length; i += 2) {
    const title = /^# (.+)$/m.exec(parts[i] as string)?.[1] ?? '';
    out.set(title.trim(), (parts[i + 1] as string).replace(/\n+$/, '\n'));
  }
  return out;
}

/** "Key : value" lines of `nvidia-smi -q`, per GPU section. */
function qTextGpus(text: string): { name: string; uuid: string; bus: string; fbTotal: string }[] {
  return text
    .split(/^GPU [0-9A-Fa-f]+:[0-9A-Fa-f:.]+$/m)
    .slice(1)
    .map((s) => ({
      name: /Product Name\s*:\s*(.+)/.exec(s)?.[1]?.trim() ?? '',
      uuid: /GPU UUID\s*:\s*(\S+)/.exec(s)?.[1] ?? '',
      bus: /^\s*Bus Id\s*:\s*(\S+)/m.exec(s)?.[1] ?? '',
      fbTotal: /FB Memory Usage\s*\n\s*Total\s*:\s*(.+)/.exec(s)?.[1]?.trim() ?? '',
    }));
}

describe.skipIf(!present)('every capture in ../shared/fixtures', () => {
  it('has a parser for every file here, so a new capture cannot go unread', () => {
    const handled = (f: string) =>
      /(query-gpu.*\.csv|\.csv\.cmd|list-L\.txt|topo-m.*\.txt|\.ttar\.txt|FULL-capture\.txt|q-text\.txt|q\.idle\.txt|q-x\.xml)$/.test(f) ||
      f.startsWith('ib-ibstatus') ||
      f.endsWith('.md') ||
      // The engines' flag sets: a copy is kept as test data and read by test/agent/engines/engine-flags.test.ts.
      f === 'engines';
    expect(files.filter((f) => !handled(f))).toEqual([]);
  });

  it.each(files.filter((f) => /query-gpu.*\.csv$/.test(f)))('%s: query-gpu CSV', (f) => {
    const { gpus, driverVersion } = parseQueryGpu(read(f));
    expect(gpus.length).toBeGreaterThan(0);
    if (f.startsWith('h100-error-state')) {
      expect(gpus[0]).toMatchObject({ index: 0, healthy: false, error: 'GPU requires reset', memoryUsedMb: 0 });
      return;
    }
    const g = gpus[0];
    expect(g?.healthy, g?.error).toBe(true);
    expect(g?.uuid).toMatch(/^GPU-/);
    expect(g?.computeCapability).toMatch(/^\d+\.\d$/);
    expect(g?.memoryTotalMb).toBeGreaterThan(10_000);
    expect(g?.pciBusId).toMatch(/^0{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$/);
    expect(driverVersion).toMatch(/^\d+\.\d+\.\d+$/);
    expect(['Enabled', 'Disabled', '']).toContain(g?.migMode);
  });

  it.each(files.filter((f) => f.endsWith('.csv.cmd')))('%s: its field list is the CSV header', (f) => {
    const fields = /--query-gpu=(\S+)/.exec(read(f))?.[1]?.split(',') ?? [];
    const csv = parseNvidiaCsv(read(f.replace(/\.cmd$/, '')));
    expect(csv.fields).toEqual(fields);
  });

  it.each(files.filter((f) => f.endsWith('list-L.txt')))('%s: -L', (f) => {
    const gpus = parseGpuList(read(f));
    expect(gpus.length).toBe(1);
    const mig = gpus[0]?.migDevices ?? [];
    if (f.includes('h100-mig')) expect(mig.map((m) => m.profile)).toEqual(['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb']);
    else if (f.includes('h200-mig')) expect(mig.map((m) => m.profile)).toEqual(['1c.3g.71gb', '2c.3g.71gb', '2g.35gb', '1g.18gb', '1g.18gb']);
    else expect(mig).toEqual([]);
  });

  it.each(files.filter((f) => /topo-m.*\.txt$/.test(f)))('%s: topo -m', (f) => {
    const m = parseTopoMatrix(read(f));
    const pairs = m.links.filter((l) => l.b.startsWith('GPU'));
    const toHca = m.links.filter((l) => !l.b.startsWith('GPU'));
    if (f.startsWith('a100x8')) {
      expect(pairs).toHaveLength(28);
      expect(pairs.every((l) => l.connection === 'NV12' && l.nvlinks === 12)).toBe(true);
      expect(toHca).toHaveLength(80);
      expect(toHca.filter((l) => l.a === 'GPU2' && l.connection === 'PXB').map((l) => l.b)).toEqual(['mlx5_2', 'mlx5_3']);
      expect(m.gpuNuma.get(4)).toBe(7);
    } else if (f.startsWith('h100x8')) {
      expect(pairs.every((l) => l.connection === 'NV18')).toBe(true);
      expect(pairs).toHaveLength(28);
      for (let i = 0; i < 8; i++) {
        expect(toHca.filter((l) => l.a === `GPU${i}` && l.connection === 'PIX').map((l) => l.b)).toEqual([`mlx5_${i}`]);
      }
      expect(m.gpuNuma.get(7)).toBe(1);
    } else {
      expect(m.links).toEqual([]);
      expect(m.gpuNuma.get(0)).toBe(0);
    }
  });

  it.each(files.filter((f) => f.endsWith('FULL-capture.txt')))('%s: the -L, topo -m, query-gpu and compute-apps sections', (f) => {
    const sections = captureSections(read(f));
    const list = [...sections].find(([t]) => t.includes('list (-L)'))?.[1] ?? '';
    expect(parseGpuList(list)).toHaveLength(1);
    const topo = [...sections].find(([t]) => t.includes('topo -m'))?.[1] ?? '';
    expect(parseTopoMatrix(topo).links).toEqual([]);
    const query = [...sections].find(([t]) => t.startsWith('idle :: query-gpu'))?.[1] ?? '';
    expect(parseQueryGpu(query).gpus[0]?.healthy).toBe(true);
    const apps = [...sections].find(([t]) => t.startsWith('load :: query-compute-apps'))?.[1] ?? '';
    const procs = parseComputeApps(apps);
    if (f.includes('rtx4080')) return;
    expect(procs.length).toBeGreaterThan(0);
    expect(procs.every((p) => p.pid > 0 && p.usedMemoryMb > 0 && p.gpuUuid.startsWith('GPU-'))).toBe(true);
  });

  it.each(files.filter((f) => /\.(q-text|q\.idle)\.txt$/.test(f)))('%s: -q agrees with what discovery reads', (f) => {
    const gpus = qTextGpus(read(f));
    expect(gpus.length).toBe(f.startsWith('h100x8') ? 8 : 1);
    for (const g of gpus) {
      expect(g.uuid).toMatch(/^GPU-/);
      expect(parseMib(g.fbTotal)).toBeGreaterThan(10_000);
    }
    const csvFile = f.replace('q.idle.txt', 'query-gpu.idle.csv');
    if (csvFile !== f && existsSync(join(DIR, csvFile))) {
      const fromCsv = parseQueryGpu(read(csvFile)).gpus[0];
      expect(gpus[0]?.bus).toBe(fromCsv?.pciBusId);
      expect(gpus[0]?.name).toBe(fromCsv?.name);
    }
  });

  it.each(files.filter((f) => f.endsWith('q-x.xml')))('%s: -q -x memory and MIG devices', (f) => {
    const xml = read(f);
    const gpus = xml.split(/<gpu id="/).slice(1);
    expect(gpus.length).toBe(f.includes('a5000x2') ? 2 : 1);
    for (const g of gpus) {
      const total = /<fb_memory_usage>\s*<total>([^<]+)<\/total>/.exec(g)?.[1] ?? '';
      expect(parseMib(total)).toBeGreaterThan(8_000);
    }
    expect((xml.match(/<mig_device>/g) ?? []).length).toBe(f.includes('mig') ? 4 : 0);
  });

  it.each(files.filter((f) => f.endsWith('.ttar.txt')))('%s: sysfs tree through probeHcas', async (f) => {
    const dir = join(tmp, f);
    extractTtar(read(f), dir);
    const root = existsSync(join(dir, 'fixtures/sys')) ? join(dir, 'fixtures') : dir;
    const { hcas, warnings } = await probeHcas({ sysfsRoot: root, fabrics: [{ hca: 'mlx4_0', fabric: 'fab' }] });
    expect(warnings).toEqual([]);
    const mlx4 = hcas.filter((h) => h.name === 'mlx4_0');
    expect(mlx4.map((h) => [h.port, h.state, h.physState, h.rateGbps, h.linkLayer, h.fabric])).toEqual([
      [1, 'ACTIVE', 'LinkUp', 40, 'InfiniBand', 'fab'],
      [2, 'ACTIVE', 'LinkUp', 40, 'InfiniBand', 'fab'],
    ]);
    if (f.includes('procfs')) {
      expect(hcas.find((h) => h.name === 'mlx5_0')).toMatchObject({ state: 'ACTIVE', physState: 'ACTIVE', rateGbps: 25, fabric: '' });
      expect(hcas.find((h) => h.name === 'hfi1_0')).toMatchObject({ rateGbps: 100 });
    } else {
      expect(hcas.find((h) => h.name === 'i40iw0')).toMatchObject({ state: 'ACTIVE', rateGbps: 10 });
    }
  });

  it.each(files.filter((f) => f.startsWith('ib-ibstatus')))('%s: ibstatus values are sysfs contents', (f) => {
    // ibstatus prints `cat` of each sysfs file after a tab and a space.
    const ports = read(f)
      .split(/Infiniband device /)
      .slice(1)
      .map((block) => {
        const v = (label: string) => new RegExp(`\\t${label}:\\t+ (.*)`).exec(block)?.[1];
        return [
          /^'([^']+)'/.exec(block)?.[1],
          parseIbPortState(v('state') ?? ''),
          parseIbPortState(v('phys state') ?? ''),
          parseIbRateGbps(v('rate') ?? ''),
          parseLinkLayer(v('link_layer')),
        ];
      });
    expect(ports).toEqual([
      ['mlx5_0', 'ACTIVE', 'LinkUp', 100, 'Ethernet'],
      ['mlx5_1', 'ACTIVE', 'LinkUp', 200, 'InfiniBand'],
      ['mlx5_2', 'DOWN', 'Disabled', 100, 'Ethernet'],
      ['mlx5_3', 'ACTIVE', 'LinkUp', 200, 'InfiniBand'],
    ]);
  });
});
