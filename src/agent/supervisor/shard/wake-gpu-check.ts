import { create } from '@bufbuild/protobuf';
import { type GpuProcess, GpuProcessSchema, type Inventory } from '../../../gen/llmgw/v1/agent_pb.js';
import type { NvmlLibrary } from '../../discovery/nvml/nvml-library.js';
import { readProcStat } from '../../../lib/process/proc-stat.js';
import { isRunningStat } from '../../../lib/process/process-identity.js';
import { isTerminal } from '../../../lib/shard-states.js';
import { COMPUTE_APPS_FIELDS, parseComputeApps } from '../../discovery/parse-compute-apps.js';
import { runNvidiaSmi } from '../../discovery/run-nvidia-smi.js';
import type { ShardSnapshot } from './shard-snapshot.js';

/*
 * A wake onto GPUs another process now holds (issue 47 item 5; review
 * engine-fidelity-3 E14). The registry keeps a sleeping shard's GPUs, so
 * only a process outside llmgw can take them; waking onto it ends badly:
 * SGLang's resume runs CUDA_ERROR_CHECK(cu_mem_create(…)) and an OOM is
 * exit(1) in its scheduler (torch_memory_saver csrc/core.cpp resume,
 * csrc/utils.h at 1a565eb); vLLM's CuMemAllocator.wake_up raises from
 * create_and_map midway through its loop, leaving some tags mapped
 * (V:vllm/device_allocator/cumem.py:341-356). So the wake is refused, naming
 * the process, with the engine left asleep. A process is ours as start
 * admission judges it (start-admission.ts validationContext): in the process
 * group of one of our engines, the sleeping one's included.
 */

/** Why GPUs `gpus` cannot be woken onto: the first process on them that is alive and in no shard's process group; undefined when none. */
export function gpusTakenBy(
  gpus: readonly number[],
  inventory: Pick<Inventory, 'gpus'>,
  processes: readonly GpuProcess[],
  shards: readonly ShardSnapshot[],
  stat: (pid: number) => { pgrp: number; running: boolean } | undefined,
): string | undefined {
  const groups = new Set(shards.filter((s) => !isTerminal(s.state) || s.running).map((s) => s.pid));
  for (const i of gpus) {
    const uuid = inventory.gpus.find((g) => g.index === i)?.uuid;
    if (!uuid) continue;
    for (const p of processes) {
      if (p.gpuUuid !== uuid || groups.has(p.pid)) continue;
      const st = stat(p.pid);
      // Gone since it was listed: it holds nothing. In one of our groups: an engine's worker.
      if (!st?.running || groups.has(st.pgrp)) continue;
      return `GPU ${i} holds ${p.usedMemoryMb} MiB of pid ${p.pid}${p.processName ? ` (${p.processName})` : ''}, which no shard owns`;
    }
  }
  return undefined;
}

export interface WakeGpuCheckOptions {
  /** The NVML the agent keeps open: processes listed in-process, in a millisecond, on the wake's path. */
  nvml?: NvmlLibrary;
  nvidiaSmi: string;
  timeoutMs: number;
  inventory: () => Inventory;
  shards: () => ShardSnapshot[];
}

/** The compute processes on `gpus` through NVML (the index the sampler reads memory by); undefined when NVML cannot say. */
function nvmlProcesses(nvml: NvmlLibrary | undefined, gpus: readonly number[], inventory: Inventory): GpuProcess[] | undefined {
  if (!nvml?.has('nvmlDeviceGetComputeRunningProcesses_v3')) return undefined;
  const out: GpuProcess[] = [];
  for (const i of gpus) {
    const uuid = inventory.gpus.find((g) => g.index === i)?.uuid ?? '';
    const procs = nvml.computeProcesses(i);
    if (!procs.ok) return undefined;
    for (const p of procs.value) out.push(create(GpuProcessSchema, { pid: p.pid, gpuUuid: uuid, usedMemoryMb: Math.floor(p.usedBytes / (1024 * 1024)) }));
  }
  return out;
}

/**
 * SleepProbes.gpusTaken for the agent: the compute processes listed now
 * (NVML in-process, else nvidia-smi --query-compute-apps), else as the last
 * hardware scan listed them (a failed call).
 */
export function wakeGpuCheck(o: WakeGpuCheckOptions): (gpus: readonly number[]) => Promise<string | undefined> {
  return async (gpus) => {
    const inventory = o.inventory();
    let processes = nvmlProcesses(o.nvml, gpus, inventory);
    if (!processes) {
      const listed = await runNvidiaSmi(o.nvidiaSmi, [`--query-compute-apps=${COMPUTE_APPS_FIELDS.join(',')}`, '--format=csv,noheader,nounits'], { timeoutMs: o.timeoutMs }).catch(() => undefined);
      processes = listed?.ok ? parseComputeApps(listed.stdout, COMPUTE_APPS_FIELDS) : inventory.processes;
    }
    return gpusTakenBy(gpus, inventory, processes, o.shards(), (pid) => {
      const st = readProcStat(pid);
      return st && { pgrp: st.pgrp, running: isRunningStat(st) };
    });
  };
}
