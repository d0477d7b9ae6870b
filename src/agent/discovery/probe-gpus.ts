import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Gpu, GpuProcess } from '../../gen/llmgw/v1/agent_pb.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { parseComputeApps, COMPUTE_APPS_FIELDS } from './parse-compute-apps.js';
import { mergeGpuList } from './merge-gpu-list.js';
import { parseGpuList } from './parse-gpu-list.js';
import { parseNumaNode } from './parse-ib-port-values.js';
import { GPU_QUERY_FIELDS, OPTIONAL_GPU_FIELDS, parseQueryGpu } from './parse-query-gpu.js';
import { parseVersionInfo } from './parse-version-info.js';
import { type NvidiaSmiResult, runNvidiaSmi } from './run-nvidia-smi.js';

export interface ProbeGpusOptions {
  nvidiaSmi: string;
  /** Limit for each nvidia-smi invocation. */
  timeoutMs: number;
  /** Root under which /sys/bus/pci/devices/<bus id>/numa_node is read. */
  sysfsRoot: string;
  signal?: AbortSignal;
  logger?: Logger;
}

export interface GpuProbe {
  gpus: Gpu[];
  processes: GpuProcess[];
  driverVersion: string;
  cudaVersion: string;
  warnings: string[];
  /**
   * False when nvidia-smi could not list GPUs at all (missing, no driver,
   * hung): further nvidia-smi calls, topology included, are pointless.
   */
  driverAvailable: boolean;
}

const INVALID_FIELD = /Field "([^"]+)" is not a valid field to query/i;

/**
 * GPUs, their health, MIG devices, compute processes, driver and CUDA
 * versions, from nvidia-smi. Never throws for hardware problems; every gap
 * becomes a warning that says why. The first query decides whether the
 * driver answers at all: when it does not, nothing else is asked, so a hung
 * driver costs one timeout, not five.
 */
export async function probeGpus(opts: ProbeGpusOptions): Promise<GpuProbe> {
  const log = opts.logger ?? silentLogger;
  const run = (args: string[]) => runNvidiaSmi(opts.nvidiaSmi, args, { timeoutMs: opts.timeoutMs, signal: opts.signal });
  const warnings: string[] = [];

  const fields: string[] = [...GPU_QUERY_FIELDS];
  let result: NvidiaSmiResult;
  for (;;) {
    result = await run([`--query-gpu=${fields.join(',')}`, '--format=csv,noheader,nounits']);
    if (result.ok) break;
    // An nvidia-smi older than a field refuses the whole query; drop the
    // field and keep the GPUs.
    const bad = INVALID_FIELD.exec(result.output)?.[1];
    if (result.kind !== 'exit' || bad === undefined || !OPTIONAL_GPU_FIELDS.includes(bad) || !fields.includes(bad)) break;
    fields.splice(fields.indexOf(bad), 1);
    log.debug({ field: bad }, 'nvidia-smi does not know a query field; retrying without it');
    if (bad === 'compute_cap') {
      warnings.push(
        'nvidia-smi is too old to report compute_cap: compute capability is unknown, so profiles with min_compute_capability will refuse these GPUs (update the driver)',
      );
    }
  }

  let parsed = result.ok ? parseQueryGpu(result.stdout, fields) : undefined;
  if (!result.ok) {
    // A failing nvidia-smi may still have printed the GPUs it could reach.
    const partial = result.kind === 'exit' ? parseQueryGpu(result.stdout, fields) : undefined;
    if (partial?.gpus.some((g) => g.index >= 0)) {
      parsed = partial;
      warnings.push(`nvidia-smi reported an error: ${result.reason}`);
    } else {
      log.warn({ err: result.reason }, 'no GPUs discovered');
      return { gpus: [], processes: [], driverVersion: '', cudaVersion: '', warnings: [noGpusWarning(result)], driverAvailable: false };
    }
  }
  const gpus = (parsed as NonNullable<typeof parsed>).gpus;
  let driverVersion = (parsed as NonNullable<typeof parsed>).driverVersion;

  const [list, apps, version] = await Promise.all([
    run(['-L']),
    run([`--query-compute-apps=${COMPUTE_APPS_FIELDS.join(',')}`, '--format=csv,noheader,nounits']),
    run(['--version']),
    fillNumaNodes(gpus, opts.sysfsRoot),
  ]);

  if (list.ok) {
    mergeGpuList(gpus, parseGpuList(list.stdout));
  } else {
    warnings.push(`MIG devices unknown: ${list.reason}`);
  }

  let processes: GpuProcess[] = [];
  if (apps.ok) processes = parseComputeApps(apps.stdout, COMPUTE_APPS_FIELDS);
  else warnings.push(`GPU processes unknown, so a GPU held by a leaked process would not show: ${apps.reason}`);

  let versions = version.ok ? parseVersionInfo(version.stdout) : undefined;
  if (!versions?.cudaVersion) {
    // Drivers before --version existed print both versions in the banner.
    const banner = await run([]);
    if (banner.ok) versions = parseVersionInfo(banner.stdout);
  }
  if (driverVersion === '') driverVersion = versions?.driverVersion ?? '';
  const cudaVersion = versions?.cudaVersion ?? '';
  if (cudaVersion === '') warnings.push('CUDA version unknown: nvidia-smi did not report it');

  return { gpus, processes, driverVersion, cudaVersion, warnings, driverAvailable: true };
}

/** The one warning for "no GPUs here", worded for the operator reading it. */
function noGpusWarning(r: Exclude<NvidiaSmiResult, { ok: true }>): string {
  if (r.kind === 'not-found') return `no NVIDIA driver: ${r.reason}`;
  if (r.kind === 'timeout') return `GPUs unavailable: ${r.reason}; the driver may be hung`;
  if (/couldn't communicate with the NVIDIA driver|driver\/library version mismatch|NVML/i.test(r.output)) {
    return `no NVIDIA driver: ${r.reason}`;
  }
  if (/No devices were found/i.test(r.output)) return `no GPUs: ${r.reason}`;
  return `GPUs unavailable: ${r.reason}`;
}

/**
 * NUMA node of each GPU from sysfs. nvidia-smi prints bus ids with an 8-digit
 * domain ("00000000:18:00.0"); sysfs names devices with 4 ("0000:18:00.0").
 */
export async function fillNumaNodes(gpus: Gpu[], sysfsRoot: string): Promise<void> {
  await Promise.all(
    gpus.map(async (gpu) => {
      const m = /^([0-9a-f]+):([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])$/i.exec(gpu.pciBusId);
      if (!m) return;
      const id = `${(m[1] as string).slice(-4)}:${m[2]}`.toLowerCase();
      const text = await readFile(join(sysfsRoot, 'sys/bus/pci/devices', id, 'numa_node'), 'utf8').catch(() => undefined);
      gpu.numaNode = parseNumaNode(text);
    }),
  );
}
