import { describe, expect, it } from 'vitest';
import { parseVersionInfo } from '../../../src/agent/discovery/parse-version-info.js';
import { gpuFixture } from '../../helpers/fake-gpus.js';

describe('parseVersionInfo', () => {
  it('reads --version output', () => {
    expect(parseVersionInfo(gpuFixture('hgx-h100x8', 'version.txt'))).toEqual({ driverVersion: '550.54.15', cudaVersion: '12.4' });
  });

  it('reads the banner of an nvidia-smi too old for --version', () => {
    expect(parseVersionInfo(gpuFixture('old-driver', 'banner.txt'))).toEqual({ driverVersion: '470.57.02', cudaVersion: '11.4' });
  });
});
