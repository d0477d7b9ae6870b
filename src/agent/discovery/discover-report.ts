import { create } from '@bufbuild/protobuf';
import { type DiscoverReportJson, DiscoverReportSchema } from '../../gen/llmgw/v1/discover_pb.js';
import { failure } from '../../lib/errors.js';
import { createLogger } from '../../lib/logger.js';
import type { LOG_LEVELS } from '../../lib/log-levels.js';
import { toProtoJson } from '../../lib/proto-json.js';
import { join } from 'node:path';
import { describeTransferRates } from '../../lib/describe-transfer-rates.js';
import { printable } from '../../lib/printable.js';
import { EngineRegistry } from '../engines/engine-registry.js';
import { readTransferRates, transferRates } from '../../models/transfer-rates.js';
import { runPreflight } from './preflight.js';
import { renderDiscoverReport } from './render-discover-report.js';
import { type DiscoverFlags, resolveDiscoverSettings } from './resolve-discover-settings.js';
import { type DiscoverRenderer, runDiscoverTasks } from './run-discover-tasks.js';

export interface DiscoverReportOptions extends DiscoverFlags {
  /** Fail (exit 1) when a preflight check fails. */
  strict: boolean;
  /** Logs below this level are dropped; the report carries every finding, logs would only repeat it. */
  logLevel?: (typeof LOG_LEVELS)[number];
  /** Progress on stderr; 'silent' for --json. */
  renderer: DiscoverRenderer;
  /** Whether the human form is wanted (not with --json). */
  text: boolean;
}

export interface DiscoverOutput {
  /** What `--json` prints: the inventory and the preflight checks. */
  report: DiscoverReportJson;
  text?: string;
}

/**
 * All of `llmgw discover` but parsing and printing: read the hardware, run
 * the preflight checks (with --config, or --strict), render. Under --strict a
 * failed check is a failure (exit 1) naming the checks; the human report is
 * printed first, and `--json` gets the whole report in the error's details.
 */
export async function discoverReport(o: DiscoverReportOptions, print: (text: string) => void): Promise<DiscoverOutput> {
  const settings = resolveDiscoverSettings(o);
  const logger = await createLogger({ level: o.logLevel ?? 'error' });
  const inventory = await runDiscoverTasks({ ...settings, renderer: o.renderer, logger });
  const engines = settings.engines ? new EngineRegistry({ engines: settings.engines, mgmtInterface: settings.mgmtInterface }) : undefined;
  // The agent measures them (a probe, its warms and pulls); discover shows its last, from its state dir.
  inventory.rates = transferRates(readTransferRates(join(settings.stateDir, 'warmth.json')));
  const checks =
    settings.fromConfig || o.strict
      ? runPreflight(inventory, {
          fabrics: settings.fabrics,
          mgmtInterface: settings.fromConfig ? settings.mgmtInterface : '',
          foreignMemoryShare: settings.foreignMemoryShare,
          // Judged for this uid: `discover --config` runs as root, as the agent does.
          engineAccounts: engines?.accounts(process.getuid?.() ?? -1) ?? [],
          engineExecutables: engines?.executables() ?? [],
        })
      : [];
  const report = toProtoJson(DiscoverReportSchema, create(DiscoverReportSchema, { inventory, checks })) as DiscoverReportJson;
  const rates = describeTransferRates(report.inventory ?? {}, Date.now());
  const text = o.text ? `${renderDiscoverReport(inventory, { mgmtInterface: settings.mgmtInterface, checks, foreignMemoryShare: settings.foreignMemoryShare })}${rates ? `\nMeasured rates: ${printable(rates)}` : ''}` : undefined;
  const failed = checks.filter((c) => !c.ok);
  if (o.strict && failed.length > 0) {
    // The report is what the operator needs to see the failures; it is printed before the one-line error.
    if (text !== undefined) print(text);
    throw failure(`preflight failed: ${failed.map((c) => c.name).join(', ')}; ${failedChecksFix(failed.map((c) => c.name))}`, { details: { ...report } });
  }
  return { report, text };
}

/**
 * The "what to do" of the --strict error, one short action per failed check
 * (its FAIL line in the report says where), so the error has the shape
 * docs/day-two.md promises: `error: <what failed>; <what to do>`.
 */
export function failedChecksFix(names: readonly string[]): string {
  const fixes = names.map((name) => {
    const [kind, arg = ''] = name.split(' ');
    switch (kind) {
      case 'driver':
        return 'install or repair the NVIDIA driver until nvidia-smi lists the GPUs';
      case 'gpu-health':
        return 'reset the unhealthy GPUs or drain the node';
      case 'foreign-processes':
        return 'stop the processes holding GPU memory that no shard owns';
      case 'foreign-memory':
        return 'free the GPU memory no process accounts for (another container, a leaked CUDA context), or raise discovery.foreign_memory_share';
      case 'fabric':
        return `bring ${arg ? `fabric ${arg}'s` : 'the'} HCA up (cable, subnet manager) or fix fabrics in the config`;
      case 'mgmt-interface':
        return 'set mgmt_interface to an interface with an IPv4 address';
      case 'engine-command':
        return `install ${arg || 'the engine'} or set engines.${arg || '<engine>'}.command (engines.${arg || '<engine>'}.enabled: false on a node that does not run it)`;
      case 'engine-account':
        return `set engines.${arg || '<engine>'}.user to an account for it (or allow_root: true)`;
      default:
        return `fix ${name}`;
    }
  });
  return `${[...new Set(fixes)].join('; ')} (each FAIL line of the report says where)`;
}
