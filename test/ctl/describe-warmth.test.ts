import { describe, expect, it } from 'vitest';
import { describeWarmth, warmthLines, WARMTH_LINES } from '../../src/ctl/describe-warmth.js';

/** `ctl status`'s warmth lines: measured figures with their count, modelled ones said as such with how. */
describe('ctl status warmth lines', () => {
  it('says what was measured, how often, and what was modelled and how', () => {
    expect(
      describeWarmth({
        model: 'acme/chat',
        engine: 'vllm',
        profile: 'chat',
        rung: 'absent',
        learned: [
          { from: 'store', medianSeconds: 41.2, samples: 3 },
          { from: 'hub', medianSeconds: 365, samples: 0, basis: 'store 41.2s + 14 GiB at 45 MiB/s from the hub (its last pull)' },
        ],
      }),
    ).toBe('acme/chat (vllm, chat): absent now; to READY from store 41.2s (×3), from hub ~365s (modelled: store 41.2s + 14 GiB at 45 MiB/s from the hub (its last pull))');
  });

  it('says the GPU memory the profile held at READY once measured, and nothing before', () => {
    const w = { model: 'acme/chat', engine: 'vllm', profile: 'chat', rung: 'store', learned: [{ from: 'store', medianSeconds: 4, samples: 1 }] };
    expect(describeWarmth({ ...w, gpuMemoryAtReadyMib: 140_006, gpuMemoryAtReadyGpus: 2 })).toBe('acme/chat (vllm, chat): store now; to READY from store 4s (×1); 140006 MiB on 2 GPUs at READY');
    expect(describeWarmth({ ...w, gpuMemoryAtReadyMib: 70_003, gpuMemoryAtReadyGpus: 1 })).toMatch(/; 70003 MiB on 1 GPU at READY$/);
    expect(describeWarmth(w)).not.toContain('at READY');
  });

  it(`lists at most ${WARMTH_LINES} models and says how many more`, () => {
    const warmth = Array.from({ length: WARMTH_LINES + 2 }, (_, i) => ({ model: `m${i}`, engine: 'sim', profile: 'p', rung: 'store', learned: [] }));
    const lines = warmthLines({ warmth });
    expect(lines).toHaveLength(WARMTH_LINES + 1);
    expect(lines.at(-1)).toBe('2 more: ctl status --json');
  });
});
