import { Flags } from '@oclif/core';
import { parseDurationArg } from '../lib/duration.js';

/** A duration flag spelt as config spells them (500ms, 30s, 5m), in milliseconds; 0 allowed. */
export const durationFlag = Flags.custom<number>({
  parse: async (text, _ctx, flag) => parseDurationArg(`--${flag.name}`, text),
});

/** A duration flag that must be more than zero: a timeout of 0s could never be met. */
export const positiveDurationFlag = Flags.custom<number>({
  parse: async (text, _ctx, flag) => parseDurationArg(`--${flag.name}`, text, { positive: true }),
});
