/** "SHARD_STATE_READY" → "READY": the prefix only repeats the column name. */
export function enumLabel(value: string | undefined, prefix: string): string {
  if (!value) return '-';
  return value.startsWith(prefix) ? value.slice(prefix.length) : value;
}
