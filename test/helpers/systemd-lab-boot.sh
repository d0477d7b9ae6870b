#!/usr/bin/env bash
# Boots a throwaway systemd as PID 1 of its own pid, mount and cgroup namespaces, so the agent's unit
# (Type=notify, WatchdogSec, KillMode, Restart=) is tested under a real service manager on machines
# whose PID 1 is not systemd. Prints the host pid of that systemd once `systemctl` answers inside.
#   pid=$(test/helpers/systemd-lab-boot.sh)
#   nsenter -t "$pid" -m -p -- systemctl …    # units go in /run/systemd/system (the lab's own /run)
#   test/helpers/systemd-lab.ts stops it: kill -9 of PID 1, then rmdir of its cgroups.
# Exit 77: not root; 69: no systemd binary; 1: it did not come up (SYSTEMD_LAB_LOG=FILE says why).
#
# Safety rules, each learned by breaking a machine (keep them all):
# - systemd sees only the lab's own units (SYSTEMD_UNIT_PATH) and runs no generators. Booted with the
#   image's units, systemd-tmpfiles empties the shared /tmp ("D /tmp"): a checkout, a CI clone or
#   another test's files there vanish; sysctl, timesyncd, apt timers or a database enabled in
#   multi-user.target would run against the host. The targets a unit's default dependencies name
#   (sysinit, basic, …) exist here, empty. The path starts with /run/systemd/transient, as a real
#   host's does: without it `systemctl daemon-reload` forgets every systemd-run unit (LoadState
#   not-found while its process still runs), which no real host does, and an agent restarted after
#   the reload saw its engines' units gone (new-operator walkthrough 2, row 3).
# - private tmpfs on /run and /var/tmp: the lab's notify socket, transient units and runtime
#   directories never mix with the host's. /tmp stays shared, so a checkout and the test's files
#   there are visible inside.
# - private tmpfs on /var/lib and /var/log too: a unit's StateDirectory= and LogsDirectory= would
#   otherwise create (and chmod) the host's production directories, /var/lib/llmgw among them.
# - its own cgroup subtree and cgroup namespace, so its shutdown kill cannot reach the host's
#   processes; everything in its pid namespace dies with its PID 1 (kill -9).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "systemd-lab: needs root (namespaces, mounts)" >&2; exit 77; }
sd=/lib/systemd/systemd
[ -x "$sd" ] || { echo "systemd-lab: $sd not installed (apt-get install systemd)" >&2; exit 69; }
# The cgroup name carries llmgw-sd- so the teardown removes only what a lab made.
cg=llmgw-sd-$$-$RANDOM
for h in systemd unified; do [ -d /sys/fs/cgroup/$h ] && mkdir -p /sys/fs/cgroup/$h/$cg; done
log=${SYSTEMD_LAB_LOG:-/dev/null}
# setsid: the lab must not share the test runner's session or process group, so a signal to either
# never reaches it and its end never reaches them.
setsid unshare --pid --fork --mount --cgroup --propagation private -- bash -c '
  set -e
  for h in systemd unified; do [ -d /sys/fs/cgroup/$h/'"$cg"' ] && echo $$ > /sys/fs/cgroup/$h/'"$cg"'/cgroup.procs; done
  mount -t tmpfs -o mode=1777 tmpfs /var/tmp
  mount -t tmpfs -o mode=755 tmpfs /run
  mount -t tmpfs -o mode=755 tmpfs /var/lib
  mount -t tmpfs -o mode=755 tmpfs /var/log
  mount -t proc proc /proc
  mkdir -p /run/systemd/system /run/lab/units /run/lab/generators
  for t in lab sysinit basic sockets timers paths slices local-fs remote-fs network network-online nss-lookup multi-user default shutdown; do
    printf "[Unit]\nDescription=%s (empty, systemd-lab)\nDefaultDependencies=no\n" "$t" > /run/lab/units/$t.target
  done
  export SYSTEMD_UNIT_PATH=/run/systemd/transient:/run/systemd/system:/run/lab/units SYSTEMD_GENERATOR_PATH=/run/lab/generators SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/lab/generators
  exec env container=systemd-lab '"$sd"' --system --unit=lab.target --log-target=console --log-level=notice
' >"$log" 2>&1 </dev/null &
outer=$!
pid=""
for _ in $(seq 100); do
  pid=$(pgrep -P "$outer" 2>/dev/null | head -1 || true)
  if [ -n "$pid" ] && nsenter -t "$pid" -m -p -- systemctl is-system-running >/dev/null 2>&1; then echo "$pid"; exit 0; fi
  sleep 0.1
done
echo "systemd-lab: systemd did not come up (set SYSTEMD_LAB_LOG=FILE to see why)" >&2
[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
for h in systemd unified; do [ -d /sys/fs/cgroup/$h/$cg ] && find /sys/fs/cgroup/$h/$cg -depth -type d -exec rmdir {} \; 2>/dev/null; done
exit 1
