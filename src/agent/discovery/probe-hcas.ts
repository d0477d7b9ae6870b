import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type Hca, HcaSchema } from '../../gen/llmgw/v1/agent_pb.js';
import type { FabricAttachmentConfig } from '../config/agent-config.js';
import { errnoCode, errorMessage } from '../../lib/errors.js';
import { type Logger, silentLogger } from '../../lib/logger.js';
import { parseIbPortState, parseIbRateGbps, parseLinkLayer, parseNumaNode } from './parse-ib-port-values.js';

export interface ProbeHcasOptions {
  /** "/" in production; a fixture tree in tests. */
  sysfsRoot: string;
  /** HCA → fabric. The only source of an HCA's fabric (see Hca.fabric). */
  fabrics: readonly FabricAttachmentConfig[];
  logger?: Logger;
}

export interface HcaProbe {
  /** One entry per HCA port, sorted by HCA name then port. */
  hcas: Hca[];
  warnings: string[];
}

/**
 * InfiniBand and RoCE ports from <sysfs_root>/sys/class/infiniband. A node
 * without the directory has no RDMA devices: that is no warning (single-node
 * serving needs none); preflight complains if config expects one. Files that
 * are missing or unreadable leave their field empty instead of losing the port.
 */
export async function probeHcas(opts: ProbeHcasOptions): Promise<HcaProbe> {
  const log = opts.logger ?? silentLogger;
  const base = join(opts.sysfsRoot, 'sys/class/infiniband');
  const warnings: string[] = [];
  let names: string[];
  try {
    names = (await readdir(base)).sort();
  } catch (err) {
    if (errnoCode(err) !== 'ENOENT') warnings.push(`HCAs unknown: cannot read ${base}: ${errorMessage(err)}`);
    return { hcas: [], warnings };
  }

  const fabricOf = new Map(opts.fabrics.map((f) => [f.hca, f.fabric]));
  const hcas: Hca[] = [];
  for (const name of names) {
    const dir = join(base, name);
    let ports: string[];
    try {
      ports = (await readdir(join(dir, 'ports'))).filter((p) => /^\d+$/.test(p)).sort((a, b) => Number(a) - Number(b));
    } catch (err) {
      warnings.push(`HCA ${name}: cannot list ports: ${errorMessage(err)}`);
      continue;
    }
    const numaNode = parseNumaNode(await read(join(dir, 'device/numa_node')));
    for (const port of ports) {
      const p = join(dir, 'ports', port);
      const [state, phys, rate, layer] = await Promise.all(['state', 'phys_state', 'rate', 'link_layer'].map((f) => read(join(p, f))));
      hcas.push(
        create(HcaSchema, {
          name,
          port: Number(port),
          state: parseIbPortState(state ?? ''),
          physState: parseIbPortState(phys ?? ''),
          rateGbps: parseIbRateGbps(rate ?? ''),
          linkLayer: parseLinkLayer(layer),
          numaNode,
          fabric: fabricOf.get(name) ?? '',
          netdev: await netdevOf(dir, Number(port)),
        }),
      );
    }
  }
  log.debug({ count: hcas.length }, 'HCA ports discovered');
  return { hcas, warnings };
}

async function read(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The network device of a port, where sysfs says: for RoCE the GID table
 * names it per port (ports/<n>/gid_attrs/ndevs/0); otherwise the PCI
 * device's net/ directory, matched to the port by dev_port (0-based) when
 * the device has more than one.
 */
async function netdevOf(hcaDir: string, port: number): Promise<string> {
  const gidDev = (await read(join(hcaDir, 'ports', String(port), 'gid_attrs/ndevs/0')))?.trim();
  if (gidDev) return gidDev;
  let devs: string[];
  try {
    devs = (await readdir(join(hcaDir, 'device/net'))).sort();
  } catch {
    return '';
  }
  if (devs.length <= 1) return devs[0] ?? '';
  for (const d of devs) {
    const devPort = (await read(join(hcaDir, 'device/net', d, 'dev_port')))?.trim();
    if (devPort !== undefined && Number(devPort) === port - 1) return d;
  }
  return devs[0] ?? '';
}
