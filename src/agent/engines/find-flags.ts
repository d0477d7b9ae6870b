/**
 * Some of an engine's option strings, and how that engine's parser reads an
 * argv, so that a flag is found however a profile spells it.
 */
export interface FlagSet {
  /** Option strings, long and short, as the engine's parser declares them. */
  flags: readonly string[];
  /**
   * The engine's own option strings that are a prefix of a listed one:
   * argparse takes an exact option before any abbreviation, so these are
   * never read as one (vLLM's --data-parallel-size, --reasoning-parser).
   */
  mayPass?: readonly string[];
  /**
   * vLLM's FlexibleArgumentParser (V:vllm/utils/argparse_utils.py:301-425):
   * `_` is read as `-` in a long name up to its first `.`, and
   * `--x.key v` / `-x.key v` as `--x '{"key": v}'`.
   */
  flexible?: boolean;
}

/** One argument of an argv that sets a listed flag. */
export interface FlagHit {
  /** The option as written, after the parser's own rewriting (`--trust_remote` → `--trust-remote`). */
  given: string;
  /** The listed option it sets. */
  flag: string;
  /** Its position in the argv. */
  index: number;
  /** The value it takes, when the argv holds one (`--x=v`, `-nV`, or the next argument). */
  value?: string;
}

/**
 * Every argument of `args` that sets a flag of `set`, as argparse (Python
 * 3.10-3.13, allow_abbrev True in both engines) would read it: `--x=v`; an
 * unambiguous prefix of a long option (`--po 9000` is `--port 9000`); a
 * prefix of a single-dash one (`-t 8` is `-tp 8` in vLLM, whose only option
 * beginning with -t it is); a one-letter option with its value attached
 * (`-n8` is `-n 8`). A prefix of several options is an error to argparse and
 * is reported too, as the first listed flag it begins: refusing what the
 * engine would refuse costs nothing, missing what it would take is the hole.
 */
export function findFlags(args: readonly string[], set: FlagSet): FlagHit[] {
  const hits: FlagHit[] = [];
  args.forEach((arg, index) => {
    const hit = flagOf(arg, set);
    if (!hit) return;
    const next = args[index + 1];
    const value = hit.value ?? (next !== undefined && !next.startsWith('-') ? next : undefined);
    hits.push({ given: hit.given, flag: hit.flag, index, ...(value !== undefined ? { value } : {}) });
  });
  return hits;
}

function flagOf(arg: string, set: FlagSet): { given: string; flag: string; value?: string } | undefined {
  // A value, `-`/`--`, or a negative number (argparse takes those as values
  // when no option looks like one, as in both engines).
  if (!arg.startsWith('-') || arg === '-' || arg === '--' || /^-\d/.test(arg)) return undefined;
  const eq = arg.indexOf('=');
  let name = eq === -1 ? arg : arg.slice(0, eq);
  const value = eq === -1 ? undefined : arg.slice(eq + 1);
  if (set.flexible) {
    const dot = name.indexOf('.');
    if (dot !== -1) name = name.slice(0, dot);
    if (name.startsWith('--')) name = `--${name.slice(2).replaceAll('_', '-')}`;
  }
  const given = name;
  if (set.flags.includes(name)) return { given, flag: name, ...(value !== undefined ? { value } : {}) };
  if (set.mayPass?.includes(name)) return undefined;
  const long = name.startsWith('--');
  // Long: any prefix with a character after the dashes. Single-dash: a prefix
  // of a single-dash option (argparse matches those with or without allow_abbrev).
  const prefixOf = set.flags.find((f) => f.startsWith(name) && (long ? name.length > 2 : !f.startsWith('--')));
  if (prefixOf !== undefined) return { given, flag: prefixOf, ...(value !== undefined ? { value } : {}) };
  // `-n8`: a one-letter option with its value attached (not after `=`, handled above).
  if (!long && eq === -1 && name.length > 2) {
    const short = name.slice(0, 2);
    if (set.flags.includes(short)) return { given: short, flag: short, value: name.slice(2) };
  }
  return undefined;
}
