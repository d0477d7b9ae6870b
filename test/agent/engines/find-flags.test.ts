import { describe, expect, it } from 'vitest';
import { type FlagSet, findFlags } from '../../../src/agent/engines/find-flags.js';

const vllmLike: FlagSet = { flags: ['--trust-remote-code', '--speculative-config', '-sc', '-n', '-tp', '--tokenizer'], mayPass: ['-dp'], flexible: true };
const argparse: FlagSet = { flags: ['--trust-remote-code', '--log-requests-target'], mayPass: ['--log-requests'] };

const given = (args: string[], set: FlagSet) => findFlags(args, set).map((h) => h.given);

describe('findFlags: a flag however argparse would read it', () => {
  it('finds the flag as written and as --flag=value, with the value it takes', () => {
    expect(findFlags(['--trust-remote-code'], argparse)).toEqual([{ given: '--trust-remote-code', flag: '--trust-remote-code', index: 0 }]);
    expect(findFlags(['--tokenizer=/etc'], vllmLike)).toEqual([{ given: '--tokenizer', flag: '--tokenizer', index: 0, value: '/etc' }]);
    expect(findFlags(['x', '--tokenizer', '/etc'], vllmLike)).toEqual([{ given: '--tokenizer', flag: '--tokenizer', index: 1, value: '/etc' }]);
  });

  it('finds an abbreviated long flag, which argparse takes for the flag it begins', () => {
    expect(findFlags(['--trust-remote'], argparse)).toMatchObject([{ given: '--trust-remote', flag: '--trust-remote-code' }]);
    expect(given(['--tr=1'], argparse)).toEqual(['--tr']);
  });

  it("leaves the engine's own options that begin a listed one, which argparse takes exactly", () => {
    expect(given(['--log-requests'], argparse)).toEqual([]);
    expect(given(['--log-requests-t', 'd'], argparse)).toEqual(['--log-requests-t']);
    expect(given(['-dp', '2'], vllmLike)).toEqual([]);
  });

  it('finds a prefix of a single-dash option (-t is -tp to argparse) and a one-letter option with its value attached (-n8 is -n 8)', () => {
    expect(findFlags(['-t', '8'], vllmLike)).toMatchObject([{ given: '-t', flag: '-tp', value: '8' }]);
    expect(findFlags(['-n8'], vllmLike)).toMatchObject([{ given: '-n', flag: '-n', value: '8' }]);
    expect(findFlags(['-n=8'], vllmLike)).toMatchObject([{ given: '-n', flag: '-n', value: '8' }]);
  });

  it("reads vLLM's spellings: underscores for dashes, and --flag.key / -x.key for a JSON field of the flag", () => {
    expect(given(['--trust_remote_code'], vllmLike)).toEqual(['--trust-remote-code']);
    expect(given(['--speculative_config.model', 'pkg.Proposer'], vllmLike)).toEqual(['--speculative-config']);
    expect(given(['-sc.model=pkg.Proposer'], vllmLike)).toEqual(['-sc']);
    // argparse (SGLang) reads neither: --trust_remote_code is not its flag.
    expect(given(['--trust_remote_code'], argparse)).toEqual([]);
  });

  it('passes values, negative numbers, - and --', () => {
    expect(given(['/etc', '-1', '-', '--', '--max-model-len=4096'], vllmLike)).toEqual([]);
  });
});
