/*
 * NCCL_IB_HCA and NCCL_SOCKET_IFNAME as NCCL reads them (review
 * engine-fidelity-3, E13). Both are lists whose entries match as PREFIXES
 * unless the whole list starts with `=`: NCCL's matchIf compares
 * `matchExact ? strlen(string) + 1 : strlen(ref)` bytes (NVIDIA/nccl
 * src/misc/utils.cc:189-193 at 01d1836; :218-222 at 5067397), and the `=`
 * (after an optional `^`) is taken off by the caller, not by parseStringList
 * (utils.cc:155-160 at 01d1836; src/transport/net_ib.cc:107-110, 140 for
 * NCCL_IB_HCA and src/include/socket.h:67-69, 96 for NCCL_SOCKET_IFNAME at
 * 01d1836; src/transport/net_ib/init.cc:320-323, 370 and src/os/linux.cc:
 * 385-388, 417 at 5067397). So `mlx5_1` also selects mlx5_10 and mlx5_11,
 * and `eth0` also eth0.100: HCAs and interfaces the agent neither chose nor
 * checked. An entry's `:port` keeps only that port of the HCA
 * (parseStringList; matchPort).
 *
 * Gloo is not NCCL: GLOO_SOCKET_IFNAME takes interface names as they are,
 * and stays without the `=`.
 */

/**
 * `entries` as an exact NCCL list: `=mlx5_0:1,mlx5_3:1`. A list the caller
 * already gave a selector (`=` exact, `^` exclude) is left as it is; an
 * empty one stays empty (NCCL then chooses, as without the variable).
 */
export function exactNcclList(entries: readonly string[]): string {
  const list = entries.join(',');
  if (list === '' || list.startsWith('=') || list.startsWith('^')) return list;
  return `=${list}`;
}
