import { EventEmitter } from 'node:events';
import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { type NodeCondition, NodeConditionSchema } from '../gen/llmgw/v1/agent_pb.js';
import type { Logger } from '../lib/logger.js';
import type { DiskPressureConfig, SupervisorConfig } from './config/agent-config.js';
import { DiskPressureWatch } from './health/disk-pressure-watch.js';
import { NodeCordon } from './node-cordon.js';

/** supervisor.disk_pressure's defaults (config-keys.ts), for a SupervisorConfig built without the loader. */
export const DEFAULT_DISK_PRESSURE: DiskPressureConfig = { minFree: 1024 ** 3, minFreeInodes: 0.05, intervalMs: 10_000 };

/** The condition types, as Inventory.conditions spells them (agent.proto). */
export const DISK_PRESSURE = 'DiskPressure';
export const CORDONED = 'Cordoned';

/**
 * The node's conditions (kubelet's node conditions): DiskPressure from the
 * disk watch, Cordoned from `ctl cordon`. One place answers what Inventory
 * carries, what a new start is refused with, and when either changes
 * ('change': the agent sends a new Inventory).
 */
export class NodeConditions extends EventEmitter<{ change: [] }> {
  readonly disk: DiskPressureWatch;
  readonly cordon: NodeCordon;

  constructor(supervisor: SupervisorConfig, logger: Logger) {
    super();
    const d = supervisor.diskPressure ?? DEFAULT_DISK_PRESSURE;
    this.disk = new DiskPressureWatch({
      dirs: [
        { key: 'log_dir', path: supervisor.logDir },
        { key: 'state_dir', path: supervisor.stateDir },
      ],
      minFreeBytes: d.minFree,
      minFreeInodes: d.minFreeInodes,
      intervalMs: d.intervalMs,
      logger,
    });
    this.cordon = new NodeCordon(supervisor.stateDir, logger);
    this.disk.on('change', () => this.emit('change'));
    this.cordon.on('change', () => this.emit('change'));
  }

  /** Before the first Register: a cordon and a full disk found at start are in it. */
  async start(): Promise<void> {
    await this.cordon.load();
    await this.disk.start();
  }

  close(): void {
    this.disk.close();
  }

  cordoned(): boolean {
    return this.cordon.current() !== undefined;
  }

  /** Every type, active or not, so a control plane reads "false" rather than guessing from an absence. */
  list(): NodeCondition[] {
    const disk = this.disk.current();
    const c = this.cordon.current();
    return [
      create(NodeConditionSchema, { type: DISK_PRESSURE, active: disk.active, reason: disk.reason, since: ms(disk.sinceMs) }),
      create(NodeConditionSchema, { type: CORDONED, active: c !== undefined, reason: c?.reason ?? '', since: ms(c?.sinceMs) }),
    ];
  }

  /** Inventory warnings for the conditions that hold: the string field older readers already show. */
  warnings(): string[] {
    const out: string[] = [];
    const disk = this.disk.current();
    if (disk.active) out.push(`disk pressure: ${disk.reason}`);
    const cordon = this.cordon.refusal();
    if (cordon) out.push(cordon);
    return out;
  }

  /** Why a new start is refused: the cordon first (an operator's decision), then disk pressure. */
  refusal(): string | undefined {
    const cordon = this.cordon.refusal();
    if (cordon) return cordon;
    const disk = this.disk.current();
    if (!disk.active) return undefined;
    const fixes = disk.keys.map((k) => (k === 'min_free' ? 'free space or lower supervisor.disk_pressure.min_free' : 'remove files or lower supervisor.disk_pressure.min_free_inodes'));
    return `node has disk pressure: ${disk.reason}; ${fixes.join(', or ')}`;
  }
}

const ms = (v: number | undefined) => (v === undefined ? undefined : timestampFromMs(v));
