import chalk from 'chalk';
import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../../lib/foreign-memory-problem.js';
import { renderTable } from '../../lib/table.js';
import type { PreflightCheck } from './preflight.js';
import { summarizeTopology } from './summarize-topology.js';

export interface RenderDiscoverOptions {
  mgmtInterface: string;
  /** Shown only when preflight ran (--config or --strict). */
  checks?: readonly PreflightCheck[];
  /** discovery.foreign_memory_share: a sound GPU the agent would start nothing on is shown so, as in ctl status. */
  foreignMemoryShare?: number;
}

/**
 * The human form of `llmgw discover`: GPUs, topology, HCAs, the management
 * interface, warnings, preflight. Colour is chalk's decision, so piped output
 * has none.
 */
export function renderDiscoverReport(inv: Inventory, opts: RenderDiscoverOptions): string {
  const out: string[] = [];
  const driver = inv.driverVersion ? `driver ${inv.driverVersion}${inv.cudaVersion ? `, CUDA ${inv.cudaVersion}` : ''}` : 'no NVIDIA driver';
  out.push(`${chalk.bold(inv.hostname || 'this node')}: ${driver}`, '');

  if (inv.gpus.length > 0) {
    const procs = (uuid: string) =>
      inv.processes
        .filter((p) => p.gpuUuid === uuid)
        .map((p) => `${p.pid}${p.processName ? ` ${p.processName}` : ''} (${p.usedMemoryMb} MiB)`)
        .join(', ');
    out.push(
      renderTable(
        ['GPU', 'NAME', 'MEMORY USED / TOTAL', 'CC', 'NUMA', 'HEALTH', 'MIG', 'PROCESSES'],
        inv.gpus.map((g) => [
          g.index >= 0 ? String(g.index) : '?',
          g.name || '-',
          `${g.memoryUsedMb} / ${g.memoryTotalMb} MiB`,
          g.computeCapability || '?',
          g.numaNode >= 0 ? String(g.numaNode) : '-',
          healthCell(g, inv, opts.foreignMemoryShare),
          g.migMode === 'Enabled' ? `${g.migDevices.map((m) => m.profile).join(' ') || 'enabled'}` : g.migMode === 'Disabled' ? 'off' : '-',
          (g.uuid && procs(g.uuid)) || '-',
        ]),
      ),
      '',
    );
  } else {
    out.push('GPUs: none', '');
  }
  out.push(`Topology: ${summarizeTopology(inv)}`, '');

  if (inv.hcas.length > 0) {
    out.push(
      renderTable(
        ['HCA', 'PORT', 'STATE', 'PHYS', 'RATE', 'LINK LAYER', 'NETDEV', 'FABRIC', 'NUMA'],
        inv.hcas.map((h) => [
          h.name,
          String(h.port),
          h.state.toUpperCase() === 'ACTIVE' ? chalk.green(h.state) : chalk.red(h.state || '?'),
          h.physState || '-',
          h.rateGbps > 0 ? `${h.rateGbps} Gb/s` : '-',
          h.linkLayer === 'Ethernet' ? 'Ethernet (RoCE)' : h.linkLayer,
          h.netdev || '-',
          h.fabric || '-',
          h.numaNode >= 0 ? String(h.numaNode) : '-',
        ]),
      ),
      '',
    );
  } else {
    out.push('HCAs: none', '');
  }

  const mgmt = inv.interfaces.find((i) => i.name === opts.mgmtInterface);
  out.push(
    `Management interface: ${opts.mgmtInterface} ${mgmt ? `${mgmt.addresses.join(', ') || 'no address'}${mgmt.up ? '' : ' (down)'}` : chalk.red('not found')}`,
  );

  if (inv.warnings.length > 0) {
    out.push('', chalk.yellow('Warnings:'), ...inv.warnings.map((w) => `  - ${w}`));
  }
  if (opts.checks && opts.checks.length > 0) {
    out.push(
      '',
      'Preflight:',
      renderTable(
        ['', 'CHECK', 'DETAIL'],
        opts.checks.map((c) => [c.ok ? chalk.green('ok') : chalk.red('FAIL'), c.name, c.detail]),
      ),
    );
  }
  return out.join('\n');
}

/** ok, UNHEALTHY with the scan's reason, or what keeps sound hardware from serving: the answer ctl status and the metrics give. */
function healthCell(g: Inventory['gpus'][number], inv: Inventory, share = DEFAULT_FOREIGN_MEMORY_SHARE): string {
  if (!g.healthy) return chalk.red(`UNHEALTHY: ${g.error}`);
  const foreign = foreignMemoryProblem(g, inv.processes, share);
  if (!foreign) return chalk.green('ok');
  const visible = inv.processes.filter((p) => p.gpuUuid === g.uuid).reduce((sum, p) => sum + Math.max(0, p.usedMemoryMb), 0);
  const pct = Math.round((100 * (g.memoryUsedMb - visible)) / g.memoryTotalMb);
  return chalk.yellow(`foreign memory ${pct}% (no shard starts on it)`);
}
