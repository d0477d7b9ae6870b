/**
 * Driver and CUDA versions from `nvidia-smi --version` (drivers from about
 * 535 on) or, failing that, from the banner of a plain `nvidia-smi`:
 *
 *   DRIVER version      : 590.48.01          (--version)
 *   CUDA Version        : 13.1
 *   | NVIDIA-SMI 590.48.01   Driver Version: 590.48.01   CUDA Version: 13.1 |
 */
export interface VersionInfo {
  driverVersion: string;
  cudaVersion: string;
}

export function parseVersionInfo(text: string): VersionInfo {
  const driver = /Driver Version\s*:\s*([0-9][\w.]*)/i.exec(text);
  const cuda = /CUDA Version\s*:\s*([0-9][\w.]*)/i.exec(text);
  return { driverVersion: driver ? (driver[1] as string) : '', cudaVersion: cuda ? (cuda[1] as string) : '' };
}
