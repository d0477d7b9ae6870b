import type { Logger } from '../../lib/logger.js';
import { NVML_ERROR_LIBRARY_NOT_FOUND, NvmlLibrary } from './nvml/nvml-library.js';

/** Where GPU facts come from, and the sentence that says why. */
export type GpuSource =
  | { kind: 'nvml'; nvml: NvmlLibrary; why: string }
  | {
      kind: 'nvidia-smi';
      why: string;
      nvmlError?: string;
      /** The library loaded but would not serve (init failed, an essential entry point missing): a broken driver, worth a warning. */
      nvmlBroken?: boolean;
    };

export interface OpenGpuSourceOptions {
  preferNvml: boolean;
  /** discovery.nvml_library: a name the dynamic loader finds, or a path. */
  nvmlLibrary: string;
}

/**
 * NVML when it is preferred and loads and initialises; nvidia-smi otherwise,
 * with the reason. The caller owns the library: close it on shutdown.
 */
export function openGpuSource(opts: OpenGpuSourceOptions): GpuSource {
  if (!opts.preferNvml) return { kind: 'nvidia-smi', why: 'discovery.prefer_nvml is false' };
  const r = NvmlLibrary.open(opts.nvmlLibrary);
  if (r.ok) return { kind: 'nvml', nvml: r.value, why: `NVML from ${opts.nvmlLibrary}` };
  return {
    kind: 'nvidia-smi',
    why: `NVML unavailable (${r.reason}); falling back to nvidia-smi`,
    nvmlError: r.reason,
    nvmlBroken: r.code !== NVML_ERROR_LIBRARY_NOT_FOUND,
  };
}

/** The one log line an agent writes about its GPU source: a warning when NVML was wanted and failed. */
export function logGpuSource(log: Logger, source: GpuSource): void {
  if (source.kind === 'nvml') log.info({ library: source.nvml.path }, 'GPUs read through NVML');
  else if (source.nvmlError !== undefined) log.warn({ err: source.nvmlError }, 'NVML unavailable; GPUs read through nvidia-smi');
  else log.info({ why: source.why }, 'GPUs read through nvidia-smi');
}
