/** A YAML map once parsed: an object that is not a list (nor null, which YAML spells as an empty value). */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
