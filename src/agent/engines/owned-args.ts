/**
 * The flags of an engine's command line the agent sets itself, which a
 * profile's args may not set again: argparse takes the last value, so a
 * `--port` or `--host` after the agent's moved the engine off the port it
 * validated and reserved, `--shutdown-timeout 0` undid the drain, a
 * `--tensor-parallel-size` broke the GPU count (security review 2, N1).
 */
export interface OwnedArgs {
  /** Option strings, long and short, as the engine's parser declares them. */
  flags: readonly string[];
  /** Long flags that are a prefix of an owned one but are the engine's own, and the profile's to set (vLLM's --data-parallel-size). */
  mayPass?: readonly string[];
  /** vLLM's parser reads `--served_model_name` as `--served-model-name` (FlexibleArgumentParser). */
  underscores?: boolean;
}

/**
 * The first argument of `args` that sets a flag of `owned`, or undefined.
 * argparse takes an unambiguous prefix of a long option for the option
 * (allow_abbrev, True in both engines' parsers), so `--po 9000` is `--port
 * 9000` there: a long flag that is the start of an owned one is refused too.
 */
export function ownedArgIn(args: readonly string[], owned: OwnedArgs): string | undefined {
  for (const arg of args) {
    if (!arg.startsWith('-') || arg === '-' || arg === '--') continue;
    let name = arg.split('=', 1)[0] as string;
    if (owned.underscores) name = name.replace(/^(-+)(.*)$/, (_m, dashes: string, rest: string) => `${dashes}${rest.replaceAll('_', '-')}`);
    if (owned.flags.includes(name)) return name;
    if (name.startsWith('--') && name.length >= 4 && !owned.mayPass?.includes(name) && owned.flags.some((f) => f.startsWith('--') && f.startsWith(name))) {
      return name;
    }
  }
  return undefined;
}
