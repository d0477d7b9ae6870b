import { afterEach, describe, expect, it, vi } from 'vitest';
import { ARGPARSE_EXIT, ArgparseError, type ArgSpec, parseArgv, printArgparseError } from '../../src/sim/engine-argv.js';

const SPECS: readonly ArgSpec[] = [
  { names: ['--port'], kind: 'int' },
  { names: ['--host'], kind: 'string' },
  { names: ['--tensor-parallel-size', '-tp'], kind: 'int' },
  { names: ['--served-model-name'], kind: 'strings' },
  { names: ['--trust-remote-code'], kind: 'flag' },
  { names: ['--dtype'], kind: 'string', choices: ['auto', 'half', 'bfloat16'] },
  { names: ['--offset'], kind: 'string' },
];

const parse = (argv: string[], opts: { maxPositionals?: number; underscoresAsDashes?: boolean } = {}) =>
  parseArgv(argv, SPECS, { maxPositionals: opts.maxPositionals ?? 1, underscoresAsDashes: opts.underscoresAsDashes });

function refusal(argv: string[], opts: { maxPositionals?: number; underscoresAsDashes?: boolean } = {}): string {
  try {
    parse(argv, opts);
  } catch (err) {
    expect(err).toBeInstanceOf(ArgparseError);
    return (err as Error).message;
  }
  throw new Error(`${argv.join(' ')} was accepted`);
}

describe('parseArgv', () => {
  it('keys values by the first name, whichever name was given, with ints as numbers', () => {
    const { values, positionals } = parse(['org/model', '--port', '8000', '-tp', '2', '--host=0.0.0.0', '--trust-remote-code']);
    expect(positionals).toEqual(['org/model']);
    expect(values.get('--port')).toBe(8000);
    expect(values.get('--tensor-parallel-size')).toBe(2);
    expect(values.has('-tp')).toBe(false);
    expect(values.get('--host')).toBe('0.0.0.0');
    expect(values.get('--trust-remote-code')).toBe(true);
    expect(values.has('--dtype')).toBe(false);
  });

  it('takes one or more values for nargs="+", stopping at the next option', () => {
    const { values } = parse(['--served-model-name', 'a', 'b', '--port', '1']);
    expect(values.get('--served-model-name')).toEqual(['a', 'b']);
    expect(values.get('--port')).toBe(1);
  });

  it('takes one value for a single-valued option, leaving the rest as positionals', () => {
    const { values, positionals } = parse(['--host', 'h', 'm1', 'm2'], { maxPositionals: 2 });
    expect(values.get('--host')).toBe('h');
    expect(positionals).toEqual(['m1', 'm2']);
  });

  it('reads a negative number as a value, not an option', () => {
    expect(parse(['--offset', '-5']).values.get('--offset')).toBe('-5');
    expect(parse(['--offset', '-.5']).values.get('--offset')).toBe('-.5');
    expect(parse(['--port', '-1']).values.get('--port')).toBe(-1);
  });

  it('lets the last occurrence win', () => {
    expect(parse(['--port', '1', '--port', '2']).values.get('--port')).toBe(2);
  });

  it('takes everything after -- as positionals', () => {
    const { positionals, values } = parse(['--', '--port', '3'], { maxPositionals: 5 });
    expect(positionals).toEqual(['--port', '3']);
    expect(values.size).toBe(0);
  });

  it('reads --a_b as --a-b only when asked (vLLM), also with =value', () => {
    expect(parse(['--tensor_parallel_size', '4'], { underscoresAsDashes: true }).values.get('--tensor-parallel-size')).toBe(4);
    expect(parse(['--served_model_name=x'], { underscoresAsDashes: true }).values.get('--served-model-name')).toEqual(['x']);
    // Unknown without the mapping; its value is then the one positional taken.
    expect(refusal(['--tensor_parallel_size', '4'])).toBe('unrecognized arguments: --tensor_parallel_size');
  });

  it('lists every unrecognized option and extra positional in one refusal', () => {
    expect(refusal(['m', '--bogus', 'extra', '--nope=1'])).toBe('unrecognized arguments: --bogus --nope=1 extra');
  });

  it('refuses a missing value in argparse wording, showing every name', () => {
    expect(refusal(['--port'])).toBe('argument --port: expected one argument');
    expect(refusal(['-tp', '--port', '1'])).toBe('argument --tensor-parallel-size/-tp: expected one argument');
    expect(refusal(['--served-model-name'])).toBe('argument --served-model-name: expected at least one argument');
  });

  it('refuses a value given to a flag', () => {
    expect(refusal(['--trust-remote-code=yes'])).toBe("argument --trust-remote-code: ignored explicit argument 'yes'");
  });

  it('refuses an int that is not one', () => {
    expect(refusal(['--port', '80.5'])).toBe("argument --port: invalid int value: '80.5'");
    expect(refusal(['--port=eighty'])).toBe("argument --port: invalid int value: 'eighty'");
  });

  it('refuses a value outside its choices, listing them', () => {
    expect(parse(['--dtype', 'half']).values.get('--dtype')).toBe('half');
    expect(refusal(['--dtype', 'fp8'])).toBe("argument --dtype: invalid choice: 'fp8' (choose from auto, half, bfloat16)");
  });

  it('treats a lone - as a positional', () => {
    expect(parse(['-']).positionals).toEqual(['-']);
  });
});

describe('printArgparseError', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('prints the usage line then "<prog>: error: <message>", as argparse does, for exit 2', () => {
    const writes: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    printArgparseError('vllm serve [-h] model', 'vllm serve', 'unrecognized arguments: --x');
    expect(writes.join('')).toBe('usage: vllm serve [-h] model\nvllm serve: error: unrecognized arguments: --x\n');
    expect(ARGPARSE_EXIT).toBe(2);
  });
});
