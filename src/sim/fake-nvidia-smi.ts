/**
 * A stand-in for nvidia-smi on machines without NVIDIA GPUs: tests, `llmgw
 * dev up` and benchmarks run discovery against it. It answers from a data set
 * of files written in nvidia-smi's own formats (fixtures/gpu/<name>/):
 *
 *   query-gpu.csv   `--query-gpu=<every field> --format=csv` output: a header
 *                   with units, then one row per GPU; any field list is
 *                   answered from its columns, in any order, with or without
 *                   header and units. A field without a column is refused the
 *                   way nvidia-smi refuses an unknown one (old drivers).
 *   list-L.txt      `-L` output.
 *   topo-m.txt      `topo -m` output, or topo-m.fail: first line an exit code,
 *                   the rest what nvidia-smi prints when topo fails.
 *   version.txt     `--version` output; absent for drivers that predate it.
 *   banner.txt      plain `nvidia-smi` output (at least its banner).
 *
 * `-l N`/`--loop=N` (seconds) and `-lms N`/`--loop-ms=N` repeat a query every
 * interval, reading the data set afresh each time, until killed or its
 * reader goes away, as nvidia-smi's loop does.
 *
 * Environment:
 *   LLMGW_FAKE_GPUS               data set: a name under fixtures/gpu or an
 *                                 absolute directory (default hgx-h100x8).
 *   LLMGW_FAKE_GPU_PROCS          file of compute processes, lines
 *                                 `pid,gpu_uuid,used_mb,name`; none when unset.
 *   LLMGW_FAKE_GPU_USAGE_DIR      where engine doubles record the GPU memory
 *                                 they hold (fake-gpu-usage.ts); added to
 *                                 memory.used.
 *   LLMGW_FAKE_NVIDIA_SMI_SLEEP   seconds to hang before answering.
 *   LLMGW_FAKE_NVIDIA_SMI_EXIT    fail every call with this exit code, as
 *                                 nvidia-smi does without a working driver.
 *   LLMGW_FAKE_NVIDIA_SMI_LOOP_SILENT  in loop mode, print nothing, as a
 *                                 tool whose piped output sits in a buffer.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readGpuUsage } from './fake-gpu-usage.js';

export const DEFAULT_FAKE_GPUS = 'hgx-h100x8';
export const FAKE_GPU_DATASETS_DIR = fileURLToPath(new URL('../../fixtures/gpu', import.meta.url));

/** Where a data set lives: a name under fixtures/gpu, or an absolute directory. */
export function fakeGpuDatasetDir(nameOrDir: string = DEFAULT_FAKE_GPUS): string {
  return isAbsolute(nameOrDir) ? nameOrDir : join(FAKE_GPU_DATASETS_DIR, nameOrDir);
}

interface Reply {
  stdout: string;
  code: number;
}

const NO_DRIVER =
  "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n";
const BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n";

/** Other spellings nvidia-smi accepts for the same query field. */
const GPU_ALIASES: Record<string, string> = { gpu_name: 'name', gpu_uuid: 'uuid', gpu_bus_id: 'pci.bus_id' };
const APP_ALIASES: Record<string, string> = { used_gpu_memory: 'used_memory', name: 'process_name' };

interface Table {
  /** Field name → unit, "" when none. */
  units: Map<string, string>;
  rows: Map<string, string>[];
}

function readTable(text: string): Table {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  const header = (lines[0] ?? '').split(',').map((h) => h.trim());
  const units = new Map<string, string>();
  const names = header.map((h) => {
    const m = /^(.*?)\s*\[([^\]]*)\]$/.exec(h);
    const name = m ? (m[1] as string) : h;
    units.set(name, m ? (m[2] as string) : '');
    return name;
  });
  const rows = lines.slice(1).map((l) => {
    const cells = l.split(',').map((c) => c.trim());
    return new Map(names.map((n, i) => [n, cells[i] ?? '']));
  });
  return { units, rows };
}

/** Renders rows for a field list the way --format=csv[,noheader][,nounits] does. */
function renderQuery(table: Table, fields: string[], format: string, aliases: Record<string, string>): Reply {
  const opts = new Set(format.split(',').map((s) => s.trim()));
  const resolved: string[] = [];
  for (const f of fields) {
    const name = table.units.has(f) ? f : aliases[f];
    if (name === undefined || !table.units.has(name)) return { stdout: `Field "${f}" is not a valid field to query.\n\n`, code: 2 };
    resolved.push(name);
  }
  const out: string[] = [];
  if (!opts.has('noheader')) {
    out.push(fields.map((f, i) => (table.units.get(resolved[i] as string) ? `${f} [${table.units.get(resolved[i] as string)}]` : f)).join(', '));
  }
  for (const row of table.rows) {
    out.push(
      resolved
        .map((name) => {
          const v = row.get(name) ?? '';
          const unit = table.units.get(name) ?? '';
          return opts.has('nounits') && unit !== '' && v.endsWith(` ${unit}`) ? v.slice(0, -unit.length - 1) : v;
        })
        .join(', '),
    );
  }
  return { stdout: out.length > 0 ? `${out.join('\n')}\n` : '', code: 0 };
}

function processTable(dir: string, procsFile: string | undefined): Table {
  const gpus = readTable(readFileSync(join(dir, 'query-gpu.csv'), 'utf8'));
  const units = new Map([
    ['pid', ''],
    ['gpu_uuid', ''],
    ['gpu_name', ''],
    ['gpu_bus_id', ''],
    ['used_memory', 'MiB'],
    ['process_name', ''],
  ]);
  const rows: Map<string, string>[] = [];
  if (procsFile) {
    for (const line of readFileSync(procsFile, 'utf8').split(/\r?\n/)) {
      if (line.trim() === '') continue;
      const [pid, uuid, mb, ...name] = line.split(',').map((s) => s.trim());
      const gpu = gpus.rows.find((r) => r.get('uuid') === uuid);
      rows.push(
        new Map([
          ['pid', pid ?? ''],
          ['gpu_uuid', uuid ?? ''],
          ['gpu_name', gpu?.get('name') ?? ''],
          ['gpu_bus_id', gpu?.get('pci.bus_id') ?? ''],
          ['used_memory', `${mb} MiB`],
          ['process_name', name.join(',')],
        ]),
      );
    }
  }
  return { units, rows };
}

/** Finds `--opt=value` or `--opt value`. */
function optionValue(args: string[], opt: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (a === opt) return args[i + 1];
    if (a.startsWith(`${opt}=`)) return a.slice(opt.length + 1);
  }
  return undefined;
}

/** memory.used (and memory.free, when listed) with what the engine doubles say they hold (fake-gpu-usage.ts). */
function withDoubleUsage(table: Table, usageDir: string | undefined): Table {
  const usage = readGpuUsage(usageDir);
  if (usage.size === 0) return table;
  for (const row of table.rows) {
    const extra = usage.get(Number(row.get('index')));
    if (extra === undefined) continue;
    const shift = (field: string, by: number) => {
      const v = row.get(field);
      if (v !== undefined) row.set(field, `${Math.max(0, Number.parseInt(v, 10) + by)} MiB`);
    };
    shift('memory.used', extra);
    shift('memory.free', -extra);
  }
  return table;
}

/** The fake's own words for an LLMGW_FAKE_GPUS that names no data set: the names there are. */
export function unknownDataset(wanted: string): string {
  let known: string[] = [];
  try {
    known = readdirSync(FAKE_GPU_DATASETS_DIR, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();
  } catch {
    // No fixtures beside this build: nothing to list.
  }
  return `fake nvidia-smi: LLMGW_FAKE_GPUS=${wanted} is no data set; known: ${known.join(', ') || 'none'}, or an absolute directory`;
}

/** The reply to one invocation, from the data set and the environment. */
export function answer(args: string[], env: NodeJS.ProcessEnv): Reply {
  const failCode = env.LLMGW_FAKE_NVIDIA_SMI_EXIT;
  if (failCode !== undefined && failCode !== '') return { stdout: NO_DRIVER, code: Number(failCode) };

  const wanted = env.LLMGW_FAKE_GPUS || DEFAULT_FAKE_GPUS;
  const dir = fakeGpuDatasetDir(wanted);
  const file = (name: string) => join(dir, name);
  // A misspelt data set read as a machine without GPUs, and nothing said which names exist (walkthrough 2, item 9).
  if (!isAbsolute(wanted) && !existsSync(dir)) return { stdout: `No devices were found (${unknownDataset(wanted)})\n`, code: 6 };
  if (!existsSync(file('query-gpu.csv'))) return { stdout: 'No devices were found\n', code: 6 };

  const format = optionValue(args, '--format') ?? 'csv';
  const gpuQuery = optionValue(args, '--query-gpu');
  if (gpuQuery !== undefined) {
    return renderQuery(withDoubleUsage(readTable(readFileSync(file('query-gpu.csv'), 'utf8')), env.LLMGW_FAKE_GPU_USAGE_DIR), gpuQuery.split(','), format, GPU_ALIASES);
  }
  const appsQuery = optionValue(args, '--query-compute-apps');
  if (appsQuery !== undefined) return renderQuery(processTable(dir, env.LLMGW_FAKE_GPU_PROCS), appsQuery.split(','), format, APP_ALIASES);

  if (args[0] === '-L' || args[0] === '--list-gpus') return { stdout: readFileSync(file('list-L.txt'), 'utf8'), code: 0 };
  if (args[0] === 'topo' && (args[1] === '-m' || args[1] === '--matrix')) {
    if (existsSync(file('topo-m.fail'))) {
      const [code, ...message] = readFileSync(file('topo-m.fail'), 'utf8').split('\n');
      return { stdout: message.join('\n'), code: Number(code) };
    }
    return { stdout: readFileSync(file('topo-m.txt'), 'utf8'), code: 0 };
  }
  if (args[0] === '--version') {
    return existsSync(file('version.txt')) ? { stdout: readFileSync(file('version.txt'), 'utf8'), code: 0 } : { stdout: BAD_ARGS, code: 2 };
  }
  if (args.length === 0 && existsSync(file('banner.txt'))) return { stdout: readFileSync(file('banner.txt'), 'utf8'), code: 0 };
  return { stdout: BAD_ARGS, code: 2 };
}

/** setTimeout's limit; a longer sleep is "forever" for every purpose here. */
const MAX_SLEEP_MS = 2 ** 31 - 1;

/** The loop interval asked for, and the arguments without it; no interval without a loop option. */
export function loopOption(args: string[]): { intervalMs?: number; rest: string[] } {
  const rest: string[] = [];
  let intervalMs: number | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    const m = /^(--loop|--loop-ms)=(.*)$/.exec(a);
    if (m) {
      intervalMs = Number(m[2]) * (m[1] === '--loop' ? 1000 : 1);
    } else if (a === '-l' || a === '-lms') {
      intervalMs = Number(args[++i]) * (a === '-l' ? 1000 : 1);
    } else {
      rest.push(a);
    }
  }
  return { intervalMs, rest };
}

async function main(): Promise<void> {
  const sleepS = Number(process.env.LLMGW_FAKE_NVIDIA_SMI_SLEEP ?? '0');
  if (sleepS > 0) await new Promise((r) => setTimeout(r, Math.min(sleepS * 1000, MAX_SLEEP_MS)));
  const { intervalMs, rest } = loopOption(process.argv.slice(2));
  if (intervalMs === undefined) {
    const reply = answer(rest, process.env);
    process.stdout.write(reply.stdout, () => process.exit(reply.code));
    return;
  }
  if (!(intervalMs > 0)) {
    process.stdout.write(BAD_ARGS, () => process.exit(2));
    return;
  }
  if (process.env.LLMGW_FAKE_NVIDIA_SMI_LOOP_SILENT) {
    setInterval(() => {}, MAX_SLEEP_MS);
    return;
  }
  // A reader that went away ends the loop, as SIGPIPE ends nvidia-smi's.
  process.stdout.on('error', () => process.exit(141));
  const tick = () => {
    const reply = answer(rest, process.env);
    if (reply.code !== 0) {
      process.stdout.write(reply.stdout, () => process.exit(reply.code));
      return;
    }
    process.stdout.write(reply.stdout);
    setTimeout(tick, intervalMs);
  };
  tick();
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
