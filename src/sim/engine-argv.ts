/**
 * A small argparse: the engine doubles take the engines' own command lines,
 * and refuse them as Python's argparse does (usage line, `<prog>: error: …`,
 * exit 2), so a launch that a real engine would refuse fails here too.
 */

/** argparse's exit status for a command line it refuses. */
export const ARGPARSE_EXIT = 2;

/**
 * `string`/`int`: one value; `strings`: one or more (argparse nargs="+");
 * `flag`: no value (store_true).
 */
export type ArgKind = 'string' | 'strings' | 'int' | 'float' | 'flag';

export interface ArgSpec {
  /** Every option string, e.g. ['--tensor-parallel-size', '-tp']. */
  names: readonly string[];
  kind: ArgKind;
  /** Values argparse accepts (choices=…). */
  choices?: readonly string[];
}

export type ArgValue = string | string[] | number | boolean;

export interface ParsedArgv {
  /** By the spec's first name, e.g. '--port'. Absent when not given. */
  values: Map<string, ArgValue>;
  positionals: string[];
}

/** A refused command line; `message` is what follows `<prog>: error: `. */
export class ArgparseError extends Error {}

export interface ParseArgvOptions {
  /** Positionals taken; more are "unrecognized" (argparse's parse_args). */
  maxPositionals: number;
  /**
   * Read `--a_b` as `--a-b`: vLLM's FlexibleArgumentParser does
   * (ENGINES review §1.1: "vLLM's parser maps `_` to `-`").
   */
  underscoresAsDashes?: boolean;
}

/** A negative number is a value, not an option (argparse's _negative_number_matcher). */
const NEGATIVE_NUMBER = /^-\d+$|^-\d*\.\d+$/;

const looksLikeOption = (a: string) => a.startsWith('-') && a !== '-' && !NEGATIVE_NUMBER.test(a);

/** Parses `argv` against `specs`; throws ArgparseError with argparse's wording. */
export function parseArgv(argv: readonly string[], specs: readonly ArgSpec[], opts: ParseArgvOptions): ParsedArgv {
  const byName = new Map<string, ArgSpec>();
  for (const s of specs) for (const n of s.names) byName.set(n, s);
  const values = new Map<string, ArgValue>();
  const positionals: string[] = [];
  const unrecognized: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (!looksLikeOption(arg)) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    let name = eq === -1 ? arg : arg.slice(0, eq);
    if (opts.underscoresAsDashes && name.startsWith('--')) name = `--${name.slice(2).replaceAll('_', '-')}`;
    const spec = byName.get(name);
    if (!spec) {
      unrecognized.push(arg);
      continue;
    }
    const key = spec.names[0] as string;
    const shown = spec.names.join('/');
    if (spec.kind === 'flag') {
      if (eq !== -1) throw new ArgparseError(`argument ${shown}: ignored explicit argument '${arg.slice(eq + 1)}'`);
      values.set(key, true);
      continue;
    }
    const taken: string[] = [];
    if (eq !== -1) taken.push(arg.slice(eq + 1));
    else {
      while (i + 1 < argv.length && !looksLikeOption(argv[i + 1] as string)) {
        taken.push(argv[++i] as string);
        if (spec.kind !== 'strings') break;
      }
    }
    if (taken.length === 0) {
      throw new ArgparseError(`argument ${shown}: expected ${spec.kind === 'strings' ? 'at least one argument' : 'one argument'}`);
    }
    for (const v of taken) {
      if (spec.choices && !spec.choices.includes(v)) {
        throw new ArgparseError(`argument ${shown}: invalid choice: '${v}' (choose from ${spec.choices.join(', ')})`);
      }
    }
    if (spec.kind === 'int') {
      const v = taken[0] as string;
      if (!/^[-+]?\d+$/.test(v.trim())) throw new ArgparseError(`argument ${shown}: invalid int value: '${v}'`);
      values.set(key, Number(v));
    } else if (spec.kind === 'float') {
      const v = taken[0] as string;
      // Python's float(): a decimal, with an exponent or not.
      if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(v.trim())) throw new ArgparseError(`argument ${shown}: invalid float value: '${v}'`);
      values.set(key, Number(v));
    } else if (spec.kind === 'strings') values.set(key, taken);
    else values.set(key, taken[0] as string);
  }
  unrecognized.push(...positionals.splice(opts.maxPositionals));
  if (unrecognized.length > 0) throw new ArgparseError(`unrecognized arguments: ${unrecognized.join(' ')}`);
  return { values, positionals };
}

/** Prints argparse's refusal (usage line, then `<prog>: error: <message>`) to stderr; the caller exits ARGPARSE_EXIT. */
export function printArgparseError(usage: string, prog: string, message: string): void {
  process.stderr.write(`usage: ${usage}\n${prog}: error: ${message}\n`);
}
