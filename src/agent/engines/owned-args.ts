import { type FlagSet, findFlags } from './find-flags.js';

/**
 * The flags of an engine's command line the agent sets itself, which a
 * profile's args may not set again: argparse takes the last value, so a
 * `--port` or `--host` after the agent's moved the engine off the port it
 * validated and reserved, `--shutdown-timeout 0` undid the drain, a
 * `--tensor-parallel-size` broke the GPU count (security review 2, N1).
 */
export type OwnedArgs = FlagSet;

/**
 * The first argument of `args` that sets a flag of `owned`, as written, or
 * undefined. Spellings are found as the engine's parser reads them
 * (findFlags): `--po 9000` is `--port 9000` to argparse, `-n8` is `-n 8`.
 */
export function ownedArgIn(args: readonly string[], owned: OwnedArgs): string | undefined {
  return findFlags(args, owned)[0]?.given;
}
