/** The first descriptor systemd passes (sd_listen_fds(3): SD_LISTEN_FDS_START). */
export const SD_LISTEN_FDS_START = 3;

/** A socket systemd passed this process, with its FileDescriptorName= ("gang"), or '' when unnamed. */
export interface ListenFd {
  fd: number;
  name: string;
}

/**
 * The sockets systemd passed this process by socket activation
 * (sd_listen_fds(3), the protocol without libsystemd): only when LISTEN_PID
 * is this process (a variable inherited from a parent names another pid and
 * passes nothing), descriptors 3.. with LISTEN_FDNAMES' names. The
 * variables are removed from `env` (sd_listen_fds' unset_environment), so
 * the engines the agent starts are not told of sockets that are not theirs.
 * The descriptors themselves do not reach them: libuv's spawn closes every
 * descriptor past stdio in the child (test: systemd-socket-handover).
 */
export function takeListenFds(env: NodeJS.ProcessEnv = process.env, pid = process.pid): ListenFd[] {
  const forUs = env.LISTEN_PID !== undefined && Number(env.LISTEN_PID) === pid;
  const count = Number(env.LISTEN_FDS ?? '0');
  const names = (env.LISTEN_FDNAMES ?? '').split(':');
  delete env.LISTEN_PID;
  delete env.LISTEN_FDS;
  delete env.LISTEN_FDNAMES;
  if (!forUs || !Number.isInteger(count) || count <= 0) return [];
  return Array.from({ length: count }, (_, i) => ({ fd: SD_LISTEN_FDS_START + i, name: names[i] ?? '' }));
}

/** The socket named `name` (FileDescriptorName=), or the only one passed (its name defaults to its unit's, e.g. llmgw-gang.socket). */
export function listenFdNamed(fds: readonly ListenFd[], name: string): ListenFd | undefined {
  return fds.find((f) => f.name === name) ?? (fds.length === 1 ? fds[0] : undefined);
}
