/**
 * The value of a gauge in Prometheus text exposition, summed over its label
 * sets (an engine serving one model has one); undefined when it is absent.
 */
export function readGauge(text: string, name: string): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.startsWith(name)) continue;
    const after = line.slice(name.length);
    // Exactly this metric: "name{…} v" or "name v", not "name_total …".
    if (!(after.startsWith('{') || after.startsWith(' '))) continue;
    const valueText = after.startsWith('{') ? after.slice(after.lastIndexOf('}') + 1) : after;
    const value = Number(valueText.trim().split(/\s+/)[0]);
    if (Number.isFinite(value)) sum = (sum ?? 0) + value;
  }
  return sum;
}
