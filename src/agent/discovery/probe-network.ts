import { readdir, readFile } from 'node:fs/promises';
import { hostname, networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { type NetInterface, NetInterfaceSchema } from '../../gen/llmgw/v1/agent_pb.js';

export interface ProbeNetworkOptions {
  /** Root under which /sys/class/net is read for operstate, mtu and MAC. */
  sysfsRoot: string;
  /** The kernel's view of addresses; os.networkInterfaces() unless a test passes another. */
  osInterfaces?: () => NodeJS.Dict<NetworkInterfaceInfo[]>;
}

export interface NetworkProbe {
  interfaces: NetInterface[];
  hostname: string;
  warnings: string[];
}

/**
 * Interfaces with their addresses (CIDR), MAC, state and MTU, plus the
 * hostname. Addresses come from the OS; sysfs adds interfaces that have no
 * address (a down RoCE port is exactly the one an operator is looking for)
 * and the state and MTU the OS API does not give.
 */
export async function probeNetwork(opts: ProbeNetworkOptions): Promise<NetworkProbe> {
  const os = (opts.osInterfaces ?? networkInterfaces)();
  const sysNet = join(opts.sysfsRoot, 'sys/class/net');
  const sysNames = await readdir(sysNet).catch(() => [] as string[]);
  const names = [...new Set([...Object.keys(os), ...sysNames])].sort();

  const interfaces = await Promise.all(
    names.map(async (name) => {
      const infos = os[name] ?? [];
      const [operstate, mtuText, address] = await Promise.all(
        ['operstate', 'mtu', 'address'].map((f) => readFile(join(sysNet, name, f), 'utf8').then((t) => t.trim(), () => undefined)),
      );
      const addresses = infos.map((i) => i.cidr ?? i.address);
      const mtu = Number.parseInt(mtuText ?? '', 10);
      return create(NetInterfaceSchema, {
        name,
        addresses,
        mac: infos.find((i) => i.mac !== '00:00:00:00:00:00')?.mac ?? address ?? '',
        // "unknown" is what loopback and many virtual devices report; an
        // address then is the better sign of life.
        up: operstate === 'up' || ((operstate === undefined || operstate === 'unknown') && addresses.length > 0),
        mtu: Number.isInteger(mtu) ? mtu : 0,
      });
    }),
  );
  return { interfaces, hostname: hostname(), warnings: [] };
}
