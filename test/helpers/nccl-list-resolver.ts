import { readdirSync } from 'node:fs';
import { join } from 'node:path';

/*
 * Which devices NCCL takes for an NCCL_IB_HCA or NCCL_SOCKET_IFNAME value,
 * written from NCCL's own rule (NVIDIA/nccl at 01d1836, and unchanged at
 * 5067397): a leading `^` excludes, then a leading `=` makes the match exact
 * (src/transport/net_ib.cc:107-110, src/include/socket.h:67-69); the rest is
 * split by parseStringList into `prefix[:port]` entries (src/misc/utils.cc:
 * 155-187); matchIf compares `matchExact ? strlen(name) + 1 : strlen(prefix)`
 * bytes (:189-193), so without `=` each entry is a prefix; matchPort takes
 * any port when either side has none (:195-200). A test-only stand-in for
 * what the engine's NCCL would do with the agent's environment.
 */

export interface NcclDevice {
  name: string;
  /** -1 for an interface (NCCL_SOCKET_IFNAME matches with port -1). */
  port: number;
}

/** The devices of `devices` that `value` selects, as `name:port` (or `name` for port -1), in their order. */
export function ncclSelects(value: string | undefined, devices: readonly NcclDevice[]): string[] {
  let list = value ?? '';
  const exclude = list.startsWith('^');
  if (exclude) list = list.slice(1);
  const exact = list.startsWith('=');
  if (exact) list = list.slice(1);
  const entries = list
    .split(',')
    .filter((e) => e !== '')
    .map((e) => {
      const [prefix = '', port] = e.split(':');
      return { prefix, port: port === undefined ? -1 : Number.parseInt(port, 10) };
    })
    .filter((e) => e.prefix !== '');
  const matchIf = (name: string, prefix: string) => (exact ? name === prefix : name.startsWith(prefix));
  const matchPort = (a: number, b: number) => a === -1 || b === -1 || a === b;
  const inList = (d: NcclDevice) => entries.length === 0 || entries.some((e) => matchIf(d.name, e.prefix) && matchPort(d.port, e.port));
  return devices.filter((d) => inList(d) !== exclude).map((d) => (d.port === -1 ? d.name : `${d.name}:${d.port}`));
}

/** Every HCA port under `<sysfsRoot>/sys/class/infiniband`, as NCCL's ibv_get_device_list and port loop see them. */
export function sysfsHcaPorts(sysfsRoot: string): NcclDevice[] {
  const base = join(sysfsRoot, 'sys/class/infiniband');
  return readdirSync(base)
    .sort()
    .flatMap((name) =>
      readdirSync(join(base, name, 'ports'))
        .map(Number)
        .sort((a, b) => a - b)
        .map((port) => ({ name, port })),
    );
}
