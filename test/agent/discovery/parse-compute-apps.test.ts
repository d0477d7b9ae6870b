import { describe, expect, it } from 'vitest';
import { COMPUTE_APPS_FIELDS, parseComputeApps } from '../../../src/agent/discovery/parse-compute-apps.js';

describe('parseComputeApps', () => {
  it('reads pid, GPU, memory and a process name that contains commas', () => {
    const text = '4242, GPU-a, 10240, /opt/venv/bin/python3\n77, GPU-b, [N/A], /tmp/a,b\n';
    expect(parseComputeApps(text, COMPUTE_APPS_FIELDS).map((p) => [p.pid, p.gpuUuid, p.usedMemoryMb, p.processName])).toEqual([
      [4242, 'GPU-a', 10240, '/opt/venv/bin/python3'],
      [77, 'GPU-b', 0, '/tmp/a,b'],
    ]);
  });

  it('reads nothing from "No running processes found"', () => {
    expect(parseComputeApps('No running processes found\n', COMPUTE_APPS_FIELDS)).toEqual([]);
  });
});
