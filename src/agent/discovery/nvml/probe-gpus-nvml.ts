import { readFile } from 'node:fs/promises';
import { create } from '@bufbuild/protobuf';
import { type Gpu, type GpuLink, GpuLinkSchema, type GpuProcess, GpuProcessSchema, GpuSchema } from '../../../gen/llmgw/v1/agent_pb.js';
import type { GpuProbe } from '../probe-gpus.js';
import { describeDoubleBitEcc, GPU_LOST_MESSAGE, ROW_REMAP_FAILURE_MESSAGE, ROW_REMAP_PENDING_MESSAGE } from '../xid-catalogue.js';
import { isUnsupported, NVML_ERROR_GPU_IS_LOST, NVML_NVLINK_MAX_LINKS, type NvmlLibrary, type NvmlResult, TOPOLOGY_WORDS } from './nvml-library.js';

const MIB = 1024 * 1024;

export interface NvmlGpuProbe {
  /** numa_node -1 and migDevices empty: the caller fills them (sysfs, nvidia-smi -L). */
  gpus: GpuProbe;
  /** GPU-GPU pairs once each, in topo -m's order (GPU0-GPU1, GPU0-GPU2, ...). */
  gpuLinks: GpuLink[];
}

/**
 * GPUs, their health, compute processes, versions and GPU-GPU links, from
 * NVML. A GPU that answers GPU_IS_LOST is kept, unhealthy, with the reason,
 * as the nvidia-smi probe keeps a "[GPU requires reset]" row.
 */
export async function probeGpusNvml(nvml: NvmlLibrary): Promise<NvmlGpuProbe> {
  const warnings: string[] = [];
  const gpus: Gpu[] = [];
  const processes: GpuProcess[] = [];
  const warnOnce = (w: string) => {
    if (!warnings.includes(w)) warnings.push(w);
  };

  for (let i = 0; i < nvml.gpuCount; i++) {
    const faults: string[] = [];
    const lost = (r: NvmlResult<unknown>) => !r.ok && r.code === NVML_ERROR_GPU_IS_LOST;
    const value = <T>(r: NvmlResult<T>, fallback: T, what: string): T => {
      if (r.ok) return r.value;
      if (lost(r)) {
        if (!faults.includes(GPU_LOST_MESSAGE)) faults.push(GPU_LOST_MESSAGE);
      } else if (isUnsupported(r)) {
        warnOnce(`NVML does not report ${what} here (${r.reason})`);
      } else {
        faults.push(`NVML reported no ${what}: ${r.reason}`);
      }
      return fallback;
    };
    const uuid = value(nvml.uuid(i), '', 'uuid');
    const name = value(nvml.name(i), '', 'name');
    const pciBusId = value(nvml.pciBusId(i), '', 'PCI bus id');
    const cc = nvml.computeCapability(i);
    if (!cc.ok && isUnsupported(cc)) {
      warnOnce('NVML does not report compute capability: profiles with min_compute_capability will refuse these GPUs (update the driver)');
    }
    const computeCapability = cc.ok ? cc.value : lost(cc) ? value(cc, '', 'compute capability') : '';
    const memory = value(nvml.memory(i), { total: 0, used: 0 }, 'memory');

    const dbe = nvml.doubleBitEccErrors(i);
    if (dbe.ok && dbe.value > 0) faults.push(describeDoubleBitEcc(dbe.value));
    const rows = nvml.remappedRows(i);
    if (rows.ok && rows.value.failure) faults.push(ROW_REMAP_FAILURE_MESSAGE);
    else if (rows.ok && rows.value.pending) faults.push(ROW_REMAP_PENDING_MESSAGE);

    const procs = nvml.computeProcesses(i);
    if (procs.ok) {
      for (const p of procs.value) {
        processes.push(
          create(GpuProcessSchema, { pid: p.pid, gpuUuid: uuid, usedMemoryMb: Math.floor(p.usedBytes / MIB), processName: await processName(p.pid) }),
        );
      }
    } else if (!lost(procs)) {
      warnOnce(`GPU processes unknown, so a GPU held by a leaked process would not show: ${procs.reason}`);
    }

    gpus.push(
      create(GpuSchema, {
        index: i,
        uuid,
        name,
        computeCapability,
        memoryTotalMb: Math.floor(memory.total / MIB),
        memoryUsedMb: Math.floor(memory.used / MIB),
        pciBusId,
        numaNode: -1,
        healthy: faults.length === 0,
        error: faults.join('; '),
        migMode: '',
      }),
    );
  }

  const driver = nvml.driverVersion();
  const cuda = nvml.cudaVersion();
  if (!cuda.ok) warnings.push(`CUDA version unknown: NVML did not report it (${cuda.reason})`);
  return {
    gpus: {
      gpus,
      processes,
      driverVersion: driver.ok ? driver.value : '',
      cudaVersion: cuda.ok ? cuda.value : '',
      warnings,
      driverAvailable: true,
    },
    gpuLinks: gpuLinks(nvml, gpus),
  };
}

/**
 * GPU-GPU connections as topo -m names them. NVLink counts come from the
 * links themselves: nvmlDeviceGetTopologyCommonAncestor describes the PCIe
 * path only. A link whose far end is no GPU of ours goes to an NVSwitch;
 * two GPUs on switches talk over the links both have (an HGX H100's NV18).
 */
function gpuLinks(nvml: NvmlLibrary, gpus: Gpu[]): GpuLink[] {
  const busIndex = new Map(gpus.filter((g) => g.pciBusId !== '').map((g) => [g.pciBusId.toUpperCase(), g.index]));
  const direct = gpus.map(() => new Map<number, number>());
  const switchLinks = gpus.map(() => 0);
  gpus.forEach((g, i) => {
    if (!g.healthy && g.error.startsWith('GPU is lost')) return;
    for (let link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
      const active = nvml.nvLinkActive(i, link);
      if (!active.ok) break; // not supported: no NVLink on this GPU
      if (!active.value) continue;
      const remote = nvml.nvLinkRemoteBusId(i, link);
      if (!remote.ok) continue;
      const peer = busIndex.get(remote.value.toUpperCase());
      if (peer === undefined) switchLinks[i] = (switchLinks[i] ?? 0) + 1;
      else direct[i]?.set(peer, (direct[i]?.get(peer) ?? 0) + 1);
    }
  });
  const links: GpuLink[] = [];
  for (let a = 0; a < gpus.length; a++) {
    for (let b = a + 1; b < gpus.length; b++) {
      let nv = direct[a]?.get(b) ?? 0;
      if (nv === 0) nv = Math.min(switchLinks[a] ?? 0, switchLinks[b] ?? 0);
      let connection: string | undefined = nv > 0 ? `NV${nv}` : undefined;
      if (connection === undefined) {
        const level = nvml.commonAncestor(a, b);
        if (!level.ok) continue;
        connection = TOPOLOGY_WORDS[level.value] ?? 'SYS';
      }
      links.push(create(GpuLinkSchema, { a: `GPU${a}`, b: `GPU${b}`, connection, nvlinks: nv }));
    }
  }
  return links;
}

/** NVML names no process: its executable, as nvidia-smi shows it, from /proc. */
async function processName(pid: number): Promise<string> {
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  return cmdline.split('\0')[0] ?? '';
}
