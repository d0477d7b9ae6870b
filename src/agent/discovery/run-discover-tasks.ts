import { Listr } from 'listr2';
import { progressListrOptions } from '../../lib/listr-options.js';
import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import { assembleInventory } from './assemble-inventory.js';
import { type DiscoverOptions, gpuSourceOptions } from './discover.js';
import { type GpuSourceProbe, mergeNvmlTopology, probeGpusBySource } from './probe-gpus-by-source.js';
import type { GpuProbe } from './probe-gpus.js';
import { type HcaProbe, probeHcas } from './probe-hcas.js';
import { type NetworkProbe, probeNetwork } from './probe-network.js';
import { type TopologyProbe, probeTopology } from './probe-topology.js';

/** default: spinners (both streams are terminals); simple: one line per task; silent: nothing (--json). */
export type DiscoverRenderer = 'default' | 'simple' | 'silent';

interface Ctx {
  gpus?: GpuProbe;
  bySource?: GpuSourceProbe;
  topology?: TopologyProbe;
  hcas?: HcaProbe;
  network?: NetworkProbe;
}

/**
 * discover(), as a listr2 task list an operator can watch: one task per
 * probe. Progress goes to stderr so that stdout carries only the report,
 * and a pipe or a --json consumer sees no spinner.
 */
export async function runDiscoverTasks(opts: DiscoverOptions & { renderer: DiscoverRenderer }): Promise<Inventory> {
  const base = { nvidiaSmi: opts.nvidiaSmi, timeoutMs: opts.timeoutMs, signal: opts.signal, logger: opts.logger };
  const tasks = new Listr<Ctx, 'default' | 'simple' | 'silent', 'simple'>(
    [
      {
        title: 'GPUs',
        // No GPUs is shown failed (✖), not done (✔), and the other probes still run: a node that
        // finds none is useless to the control plane (new-operator walkthrough 2, row 21).
        exitOnError: false,
        task: async (ctx, task) => {
          ctx.bySource = await probeGpusBySource({ ...base, ...gpuSourceOptions(opts), sysfsRoot: opts.sysfsRoot });
          ctx.gpus = ctx.bySource.gpus;
          const n = ctx.gpus.gpus.length;
          // Which source, and why, said once: NVML, or the reason it was not.
          const via = ctx.bySource.source === 'nvml' ? `via ${ctx.bySource.why}` : `via nvidia-smi: ${ctx.bySource.why}`;
          if (n > 0) {
            task.title = `GPUs: ${n} found ${via}`;
            return;
          }
          task.title = 'GPUs: none';
          throw new Error(`${ctx.gpus.warnings.at(-1) ?? 'nvidia-smi listed none'}; ${via}`);
        },
      },
      {
        title: 'Topology (nvidia-smi topo -m)',
        skip: (ctx) => (ctx.gpus?.driverAvailable && (ctx.gpus.gpus.length ?? 0) > 0 ? false : 'no GPUs'),
        task: async (ctx, task) => {
          ctx.topology = await probeTopology(base);
          const nvmlLinks = ctx.bySource?.nvmlLinks;
          if (nvmlLinks) ctx.topology = mergeNvmlTopology(nvmlLinks, ctx.topology);
          task.title = ctx.topology.warnings.length > 0 ? 'Topology: unavailable' : `Topology: ${ctx.topology.links.length} links`;
        },
      },
      {
        title: 'HCAs (sysfs)',
        task: async (ctx, task) => {
          ctx.hcas = await probeHcas({ sysfsRoot: opts.sysfsRoot, fabrics: opts.fabrics, logger: opts.logger });
          task.title = `HCAs: ${ctx.hcas.hcas.length} ports`;
        },
      },
      {
        title: 'Network interfaces',
        task: async (ctx, task) => {
          ctx.network = await probeNetwork({ sysfsRoot: opts.sysfsRoot });
          task.title = `Network: ${ctx.network.interfaces.length} interfaces`;
        },
      },
    ],
    { ...progressListrOptions(opts.renderer), exitOnError: true },
  );
  const ctx = await tasks.run({});
  return assembleInventory({
    gpus: ctx.gpus as GpuProbe,
    topology: ctx.topology,
    hcas: ctx.hcas as HcaProbe,
    network: ctx.network as NetworkProbe,
  });
}
