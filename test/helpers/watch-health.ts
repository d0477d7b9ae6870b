/**
 * GET /health of the engine on `port` every 50 ms until stop(); every answer
 * that was not 200 is a failure a router saw. Each ask may take 5 s: a loaded
 * 2-core runner may be slow to answer; no answer at all is what this catches.
 */
export function watchHealth(port: number): { stop(): Promise<{ ok: number; bad: string[] }> } {
  let running = true;
  let ok = 0;
  const bad: string[] = [];
  const loop = (async () => {
    while (running) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5000) });
        if (res.status === 200) ok++;
        else bad.push(`HTTP ${res.status}`);
      } catch (err) {
        bad.push(err instanceof Error ? err.message : String(err));
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { ok, bad };
    },
  };
}
