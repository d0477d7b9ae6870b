/** Where an effective value came from, for `--print-config` and error messages. */
export type ValueSource =
  | { kind: 'default' }
  | { kind: 'file'; path: string; line: number }
  | { kind: 'env'; name: string }
  | { kind: 'flag'; name: string };

/** A key's value as written, before it is parsed, with where it was written. */
export interface RawValue {
  value: unknown;
  source: ValueSource;
}

export function describeSource(source: ValueSource): string {
  switch (source.kind) {
    case 'default':
      return 'default';
    case 'file':
      return `${source.path}:${source.line}`;
    case 'env':
      return `env ${source.name}`;
    case 'flag':
      return `flag --${source.name}`;
  }
}
