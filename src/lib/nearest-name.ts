/** Levenshtein distance, for "did you mean" hints on misspelt keys and names. */
function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0] as number;
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = prev[j] as number;
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      prev[j] = Math.min(above + 1, (prev[j - 1] as number) + 1, diag + cost);
      diag = above;
    }
  }
  return prev[b.length] as number;
}

/**
 * The candidate closest to `name`, if it is close enough to be a plausible
 * typo (within a third of the name's length, at least 2 edits).
 */
export function nearestName(name: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const c of candidates) {
    const d = editDistance(name.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  const limit = Math.max(2, Math.ceil(name.length / 3));
  return bestDistance <= limit ? best : undefined;
}
