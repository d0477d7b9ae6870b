/** A parsed config value's shape (agent config, deployment), as an error message names it ("a list", "string \"5\""). */
export function describeValue(v: unknown): string {
  if (Array.isArray(v)) return 'a list';
  if (v === null) return 'empty';
  if (typeof v === 'object') return 'a map';
  return `${typeof v} ${JSON.stringify(v)}`;
}
