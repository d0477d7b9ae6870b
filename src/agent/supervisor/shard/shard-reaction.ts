import type { ShardTransition } from './shard-snapshot.js';

/**
 * One thing the agent does when a shard changes state, by name, as Nomad's
 * task runner hooks (taskrunner/task_runner_hooks.go): the supervisor runs
 * every reaction in one loop, in the order they were added
 * (Supervisor.react), and names the one that throws
 * (`exited hook %q failed` in Nomad), which the others outlive.
 */
export interface ShardReaction {
  name: string;
  on: (t: ShardTransition) => void;
}
