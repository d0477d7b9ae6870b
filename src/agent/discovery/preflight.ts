import type { Inventory } from '../../gen/llmgw/v1/agent_pb.js';
import { DEFAULT_FOREIGN_MEMORY_SHARE, foreignMemoryProblem } from '../../lib/foreign-memory-problem.js';
import type { FabricAttachmentConfig } from '../config/agent-config.js';
import { describeEngineAccount, type EngineAccount } from '../engines/engine-account.js';

export interface PreflightCheck {
  name: string;
  ok: boolean;
  /** What was found, or what is wrong; one line. */
  detail: string;
}

export interface PreflightOptions {
  fabrics: readonly FabricAttachmentConfig[];
  /** The interface NCCL bootstraps over; "" skips the check (nothing configured). */
  mgmtInterface: string;
  /** Pids of engines the agent owns; every other compute process is foreign. */
  ownedPids?: ReadonlySet<number>;
  /** Share (0..1) of a GPU's memory that may be used by no visible process; DEFAULT_FOREIGN_MEMORY_SHARE when unset. */
  foreignMemoryShare?: number;
  /** Who each registered engine runs as (with a config); one whose starts are refused fails its check. */
  engineAccounts?: readonly EngineAccount[];
  /** Each registered engine's argv[0] and what it resolved to on PATH; one that resolved to nothing fails its check. */
  engineExecutables?: readonly { engine: string; command: string; path: string | undefined }[];
}

/**
 * Is this node fit to serve? Pure: judges an Inventory against config, so
 * `llmgw discover` and the agent give the same answers. Checks, in order:
 * driver present; every GPU healthy; no foreign compute process on any GPU;
 * no GPU memory used by nothing visible;
 * each configured fabric's HCA exists and is ACTIVE; the management
 * interface exists with an IPv4 address; each engine has an account it may
 * run as (a root agent refuses an engine with neither a user nor allow_root),
 * and its executable resolves.
 */
export function runPreflight(inv: Inventory, opts: PreflightOptions): PreflightCheck[] {
  const checks: PreflightCheck[] = [
    driverCheck(inv),
    gpuHealthCheck(inv, opts.foreignMemoryShare ?? DEFAULT_FOREIGN_MEMORY_SHARE),
    foreignProcessCheck(inv, opts.ownedPids ?? new Set()),
    foreignMemoryCheck(inv, opts.foreignMemoryShare ?? DEFAULT_FOREIGN_MEMORY_SHARE),
  ];
  for (const f of opts.fabrics) checks.push(fabricCheck(inv, f));
  if (opts.mgmtInterface !== '') checks.push(mgmtInterfaceCheck(inv, opts.mgmtInterface));
  for (const a of opts.engineAccounts ?? []) checks.push({ name: `engine-account ${a.engine}`, ok: !a.refused, detail: describeEngineAccount(a) });
  // An account to run as says nothing of the program: every start of an engine whose executable is absent fails (walkthrough 4, O10).
  for (const e of opts.engineExecutables ?? []) checks.push(engineCommandCheck(e));
  return checks;
}

function engineCommandCheck(e: { engine: string; command: string; path: string | undefined }): PreflightCheck {
  const name = `engine-command ${e.engine}`;
  if (e.path !== undefined) return { name, ok: true, detail: e.path === e.command ? e.path : `${e.command} → ${e.path}` };
  const where = e.command.includes('/') ? 'is not an executable file' : "is not found on this PATH (the agent's may differ: systemd's)";
  return { name, ok: false, detail: `${JSON.stringify(e.command)} ${where}; every start of ${e.engine} would fail` };
}

function driverCheck(inv: Inventory): PreflightCheck {
  if (inv.gpus.length > 0 || inv.driverVersion !== '') {
    const cuda = inv.cudaVersion ? `, CUDA ${inv.cudaVersion}` : '';
    return { name: 'driver', ok: true, detail: `driver ${inv.driverVersion || 'unknown'}${cuda}, ${inv.gpus.length} GPUs` };
  }
  const why = inv.warnings.find((w) => /^(no NVIDIA driver|no GPUs|GPUs unavailable)/.test(w));
  return { name: 'driver', ok: false, detail: why ?? 'no NVIDIA driver: nvidia-smi listed no GPUs' };
}

/** The hardware's health; a sound GPU no shard may start on (foreign memory) is foreign-memory's to fail, and named here, not called healthy (walkthrough 4, O10). */
function gpuHealthCheck(inv: Inventory, share: number): PreflightCheck {
  if (inv.gpus.length === 0) return { name: 'gpu-health', ok: false, detail: 'no GPUs to serve on' };
  const bad = inv.gpus.filter((g) => !g.healthy);
  if (bad.length === 0) {
    const refused = inv.gpus.filter((g) => foreignMemoryProblem(g, inv.processes, share) !== undefined).map((g) => g.index);
    const but = refused.length === 0 ? '' : `; GPU${refused.length === 1 ? '' : 's'} ${refused.join(', ')} take${refused.length === 1 ? 's' : ''} no shard all the same (see foreign-memory)`;
    return { name: 'gpu-health', ok: true, detail: `all ${inv.gpus.length} GPUs free of hardware faults${but}` };
  }
  const list = bad.map((g) => `${g.index >= 0 ? `GPU ${g.index}` : `GPU at ${g.pciBusId || 'unknown bus'}`}: ${g.error || 'unhealthy'}`);
  return { name: 'gpu-health', ok: false, detail: `${list.join('; ')} (reset the GPU or drain the node)` };
}

function foreignProcessCheck(inv: Inventory, owned: ReadonlySet<number>): PreflightCheck {
  const indexOf = new Map(inv.gpus.map((g) => [g.uuid, g.index]));
  const foreign = inv.processes.filter((p) => !owned.has(p.pid));
  if (foreign.length === 0) return { name: 'foreign-processes', ok: true, detail: 'no compute process on any GPU that no shard owns' };
  const list = foreign.map((p) => {
    const gpu = indexOf.get(p.gpuUuid);
    return `pid ${p.pid}${p.processName ? ` (${p.processName})` : ''} holds ${p.usedMemoryMb} MB on ${gpu !== undefined ? `GPU ${gpu}` : p.gpuUuid}`;
  });
  return { name: 'foreign-processes', ok: false, detail: `${list.join('; ')}; stop it or it will collide with engines placed there` };
}

function foreignMemoryCheck(inv: Inventory, share: number): PreflightCheck {
  const name = 'foreign-memory';
  // Nothing to judge without GPUs; the driver and gpu-health checks fail and say why.
  if (inv.gpus.length === 0) return { name, ok: true, detail: 'no GPUs to check (see driver)' };
  const problems = inv.gpus.map((g) => foreignMemoryProblem(g, inv.processes, share)).filter((p) => p !== undefined);
  if (problems.length === 0) return { name, ok: true, detail: `no GPU has more than ${Math.round(share * 100)}% of its memory used by nothing visible` };
  return { name, ok: false, detail: problems.join('; ') };
}

function fabricCheck(inv: Inventory, f: FabricAttachmentConfig): PreflightCheck {
  const name = `fabric ${f.fabric}`;
  const ports = inv.hcas.filter((h) => h.name === f.hca);
  if (ports.length === 0) {
    const known = [...new Set(inv.hcas.map((h) => h.name))];
    return { name, ok: false, detail: `HCA ${f.hca} not found (HCAs here: ${known.length > 0 ? known.join(', ') : 'none'})` };
  }
  const active = ports.find((p) => p.state.toUpperCase() === 'ACTIVE');
  if (active) {
    return { name, ok: true, detail: `${f.hca} port ${active.port} ACTIVE, ${active.rateGbps} Gb/s ${active.linkLayer}` };
  }
  const states = ports.map((p) => `port ${p.port} ${p.state || 'unknown'}${p.physState ? ` (${p.physState})` : ''}`).join(', ');
  return { name, ok: false, detail: `${f.hca} is not ACTIVE: ${states}; check the cable and the subnet manager` };
}

function mgmtInterfaceCheck(inv: Inventory, mgmt: string): PreflightCheck {
  const name = 'mgmt-interface';
  const iface = inv.interfaces.find((i) => i.name === mgmt);
  if (!iface) {
    return { name, ok: false, detail: `${mgmt} not found (interfaces: ${inv.interfaces.map((i) => i.name).join(', ') || 'none'}); set mgmt_interface` };
  }
  const v4 = iface.addresses.filter((a) => /^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(a));
  if (v4.length === 0) return { name, ok: false, detail: `${mgmt} has no IPv4 address; NCCL and Gloo bootstrap over it` };
  return { name, ok: true, detail: `${mgmt} ${v4.join(', ')}` };
}
