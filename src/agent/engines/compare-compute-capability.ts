/** "9.0" → [9, 0]; undefined when it is not major.minor. */
export function parseComputeCapability(text: string): [number, number] | undefined {
  const m = /^\s*(\d+)\.(\d+)\s*$/.exec(text);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

/**
 * Numeric major.minor comparison: "10.0" is above "9.0", which a string
 * comparison gets wrong (Blackwell GPUs would be refused as too old).
 * Negative, 0 or positive like a sort comparator; both arguments must parse.
 */
export function compareComputeCapability(a: string, b: string): number {
  const x = parseComputeCapability(a);
  const y = parseComputeCapability(b);
  if (!x || !y) throw new Error(`not a compute capability: ${!x ? a : b}`);
  return x[0] - y[0] || x[1] - y[1];
}
