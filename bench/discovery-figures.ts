/**
 * Figures 9 and nvml: GPU discovery. 9: `llmgw discover --json` on the
 * 8-GPU fixtures. nvml: NVML beside nvidia-smi for discovery and one memory
 * reading, and the health watch's close() with an NVML event wait pending.
 */
import { FAKE_NVIDIA_SMI, FIXTURE_SYSFS } from '../test/helpers/agent-config-yaml.js';
import { BIN } from '../test/helpers/run-cli.js';
import { median } from './bench-support.js';
import { ms, timeCommand, timeSideBySide } from './command-timing.js';
import type { BenchRow } from './fleet-figure.js';

export async function discoverFigure(rows: BenchRow[]): Promise<void> {
  const m = timeCommand([process.execPath, BIN, 'discover', '--json', '--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', FIXTURE_SYSFS], 5);
  rows.push({ figure: '9 `llmgw discover --json` on the 8-GPU fixtures', measured: ms(m), reference: '-', target: 'recorded', met: undefined });
}

/**
 * GPUs through NVML beside nvidia-smi, in the same run: `discover --json`
 * (the fake libnvidia-ml.so and the fake nvidia-smi answer from the same data
 * set), one heartbeat memory reading of 8 GPUs (in-process NVML calls
 * against one nvidia-smi query), and how long the health watch's close()
 * takes with an NVML event wait pending (SIGTERM budget 300 ms).
 */
export async function nvmlFigures(rows: BenchRow[], quick: boolean): Promise<void> {
  const { buildFakeNvml } = await import('../test/agent/discovery/fake-nvml.js');
  const { NvmlLibrary } = await import('../src/agent/discovery/nvml/nvml-library.js');
  const { GpuHealthWatch } = await import('../src/agent/health/gpu-health-watch.js');
  const lib = buildFakeNvml();
  const discover = [BIN, 'discover', '--json', '--nvidia-smi', FAKE_NVIDIA_SMI, '--sysfs-root', FIXTURE_SYSFS];
  const viaNvml = ['/usr/bin/env', `LLMGW_DISCOVERY_NVML_LIBRARY=${lib}`, process.execPath, ...discover];
  const viaSmi = ['/usr/bin/env', 'LLMGW_DISCOVERY_PREFER_NVML=false', process.execPath, ...discover];
  const [nvmlMs, smiMs] = timeSideBySide([viaNvml, viaSmi], quick ? 3 : 7);
  rows.push({ figure: 'nvml `discover --json`, 8 GPUs: NVML (reference: nvidia-smi)', measured: ms(nvmlMs as number), reference: ms(smiMs as number), target: 'recorded', met: undefined });

  const opened = NvmlLibrary.open(lib);
  if (!opened.ok) throw new Error(opened.reason);
  const nvml = opened.value;
  try {
    const reads: number[] = [];
    for (let r = 0; r < (quick ? 200 : 1000); r++) {
      const t0 = performance.now();
      for (let i = 0; i < nvml.gpuCount; i++) nvml.memory(i);
      reads.push(performance.now() - t0);
    }
    const smiRead = timeCommand([FAKE_NVIDIA_SMI, '--query-gpu=index,memory.used', '--format=csv,noheader,nounits'], quick ? 3 : 7);
    const nvmlRead = median(reads);
    rows.push({
      figure: 'nvml one heartbeat memory reading, 8 GPUs: NVML in-process (reference: one nvidia-smi query)',
      measured: `${(nvmlRead * 1000).toFixed(0)} µs`,
      reference: ms(smiRead),
      target: 'no process per reading',
      met: nvmlRead < smiRead,
    });

    const closes: number[] = [];
    for (let r = 0; r < (quick ? 5 : 15); r++) {
      const watch = new GpuHealthWatch({ nvml, kmsgPath: '', pollIntervalMs: 60_000 });
      await watch.start();
      // Mid-wait: half the default 100 ms wait has passed.
      await new Promise((resolve) => setTimeout(resolve, 50 + r * 7));
      const t0 = performance.now();
      await watch.close();
      closes.push(performance.now() - t0);
    }
    rows.push({
      figure: 'nvml health watch close() with an NVML event wait pending',
      measured: `${ms(median(closes))} median, ${ms(Math.max(...closes))} max`,
      reference: '-',
      target: '≤ 300 ms',
      met: Math.max(...closes) <= 300,
    });
  } finally {
    nvml.close();
  }
}
