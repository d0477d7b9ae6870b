import koffi from 'koffi';

type KoffiLib = ReturnType<typeof koffi.load>;
type TypeSpec = Parameters<typeof koffi.sizeof>[0];
import { errorMessage } from '../../../lib/errors.js';

/** nvmlReturn_t values llmgw acts on (nvml.h 12.8). */
export const NVML_SUCCESS = 0;
export const NVML_ERROR_NOT_SUPPORTED = 3;
export const NVML_ERROR_INSUFFICIENT_SIZE = 7;
export const NVML_ERROR_TIMEOUT = 10;
export const NVML_ERROR_LIBRARY_NOT_FOUND = 12;
export const NVML_ERROR_FUNCTION_NOT_FOUND = 13;
export const NVML_ERROR_GPU_IS_LOST = 15;

/** nvmlEventType* bits (nvml.h). */
export const NVML_EVENT_DOUBLE_BIT_ECC = 0x2n;
export const NVML_EVENT_XID_CRITICAL = 0x8n;

/** nvmlGpuTopologyLevel_t → the word nvidia-smi topo -m prints for it. */
export const TOPOLOGY_WORDS: Record<number, string> = { 0: 'PIX', 10: 'PIX', 20: 'PXB', 30: 'PHB', 40: 'NODE', 50: 'SYS' };

export const NVML_NVLINK_MAX_LINKS = 18;

/** A call's outcome: the value, or NVML's return code and its words. */
export type NvmlResult<T> = { ok: true; value: T } | { ok: false; code: number; reason: string };

/** An nvmlDevice_t: opaque to JavaScript, compared by address. */
export type NvmlDevice = unknown;
export type NvmlEventSet = unknown;

export interface NvmlEvent {
  /** Index of the device the event names, -1 when it names none of ours. */
  gpuIndex: number;
  type: bigint;
  /** The Xid for an Xid event; 0 otherwise. */
  data: number;
}

export interface RemappedRows {
  corrected: number;
  uncorrected: number;
  pending: boolean;
  failure: boolean;
}

// Layouts from nvml.h 12.8.90.
const DeviceHandle = koffi.pointer('nvmlDevice_t', koffi.opaque('nvmlDevice_st'));
const EventSetHandle = koffi.pointer('nvmlEventSet_t', koffi.opaque('nvmlEventSet_st'));
const PciInfo = koffi.struct('nvmlPciInfo_t', {
  busIdLegacy: koffi.array('char', 16),
  domain: 'uint',
  bus: 'uint',
  device: 'uint',
  pciDeviceId: 'uint',
  pciSubSystemId: 'uint',
  busId: koffi.array('char', 32),
});
const MemoryV2 = koffi.struct('nvmlMemory_v2_t', {
  version: 'uint',
  total: 'unsigned long long',
  reserved: 'unsigned long long',
  free: 'unsigned long long',
  used: 'unsigned long long',
});
/** nvmlMemory_v2: NVML_STRUCT_VERSION(Memory, 2) = sizeof | 2 << 24. */
const MEMORY_V2_VERSION = (koffi.sizeof(MemoryV2) | (2 << 24)) >>> 0;
/** sizeof(nvmlProcessInfo_t) (v2 layout: pid, pad, usedGpuMemory, gpuInstanceId, computeInstanceId). */
export const PROCESS_INFO_SIZE = 24;
/** sizeof(nvmlEventData_t): device pointer, eventType, eventData, two instance ids. */
export const EVENT_DATA_SIZE = 32;

const ESSENTIAL = [
  'nvmlInit_v2',
  'nvmlShutdown',
  'nvmlErrorString',
  'nvmlDeviceGetCount_v2',
  'nvmlDeviceGetHandleByIndex_v2',
  'nvmlDeviceGetUUID',
  'nvmlDeviceGetPciInfo_v3',
] as const;

// biome-ignore lint/suspicious/noExplicitAny: koffi's functions are untyped at this boundary
type Fn = ((...args: any[]) => any) & { async: (...args: any[]) => void };

/**
 * NVML through koffi, with exactly the versioned entry points issue 15
 * names. An entry point the library lacks (an old driver) answers
 * NVML_ERROR_FUNCTION_NOT_FOUND, which callers read as "not supported";
 * only the ones without which no GPU can be named make loading fail.
 */
export class NvmlLibrary {
  readonly path: string;
  readonly #fns = new Map<string, Fn>();
  readonly #devices: NvmlDevice[] = [];
  #initialised = false;

  private constructor(path: string, lib: KoffiLib) {
    this.path = path;
    const declare = (name: string, ret: TypeSpec, args: TypeSpec[]) => {
      try {
        this.#fns.set(name, lib.func(name, ret, args) as Fn);
      } catch {
        // Absent from this driver's library: left out, answered as not found.
      }
    };
    const outUint = koffi.out(koffi.pointer('uint'));
    const outInt = koffi.out(koffi.pointer('int'));
    declare('nvmlInit_v2', 'int', []);
    declare('nvmlShutdown', 'int', []);
    declare('nvmlErrorString', 'const char *', ['int']);
    declare('nvmlSystemGetDriverVersion', 'int', ['char *', 'uint']);
    declare('nvmlSystemGetCudaDriverVersion_v2', 'int', [outInt]);
    declare('nvmlDeviceGetCount_v2', 'int', [outUint]);
    declare('nvmlDeviceGetHandleByIndex_v2', 'int', ['uint', koffi.out(koffi.pointer(DeviceHandle))]);
    declare('nvmlDeviceGetName', 'int', [DeviceHandle, 'char *', 'uint']);
    declare('nvmlDeviceGetUUID', 'int', [DeviceHandle, 'char *', 'uint']);
    declare('nvmlDeviceGetPciInfo_v3', 'int', [DeviceHandle, koffi.out(koffi.pointer(PciInfo))]);
    declare('nvmlDeviceGetCudaComputeCapability', 'int', [DeviceHandle, outInt, outInt]);
    declare('nvmlDeviceGetMemoryInfo_v2', 'int', [DeviceHandle, koffi.inout(koffi.pointer(MemoryV2))]);
    declare('nvmlDeviceGetComputeRunningProcesses_v3', 'int', [DeviceHandle, koffi.inout(koffi.pointer('uint')), 'void *']);
    declare('nvmlDeviceGetTopologyCommonAncestor', 'int', [DeviceHandle, DeviceHandle, outInt]);
    declare('nvmlDeviceGetNvLinkState', 'int', [DeviceHandle, 'uint', outInt]);
    declare('nvmlDeviceGetNvLinkRemotePciInfo_v2', 'int', [DeviceHandle, 'uint', koffi.out(koffi.pointer(PciInfo))]);
    declare('nvmlDeviceGetTotalEccErrors', 'int', [DeviceHandle, 'int', 'int', koffi.out(koffi.pointer('unsigned long long'))]);
    declare('nvmlDeviceGetRemappedRows', 'int', [DeviceHandle, outUint, outUint, outUint, outUint]);
    declare('nvmlEventSetCreate', 'int', [koffi.out(koffi.pointer(EventSetHandle))]);
    declare('nvmlDeviceRegisterEvents', 'int', [DeviceHandle, 'unsigned long long', EventSetHandle]);
    declare('nvmlEventSetWait_v2', 'int', [EventSetHandle, 'void *', 'uint']);
    declare('nvmlEventSetFree', 'int', [EventSetHandle]);
  }

  /**
   * Loads and initialises the library: the library, or why NVML cannot be
   * used here (not installed, an essential entry point missing, init failed).
   */
  static open(path: string): NvmlResult<NvmlLibrary> {
    let lib: KoffiLib;
    try {
      lib = koffi.load(path);
    } catch (err) {
      return { ok: false, code: NVML_ERROR_LIBRARY_NOT_FOUND, reason: `cannot load ${path}: ${firstLine(errorMessage(err))}` };
    }
    const nvml = new NvmlLibrary(path, lib);
    const missing = ESSENTIAL.filter((n) => !nvml.#fns.has(n));
    if (missing.length > 0) return { ok: false, code: NVML_ERROR_FUNCTION_NOT_FOUND, reason: `${path} lacks ${missing.join(', ')}` };
    const rc = nvml.#call('nvmlInit_v2');
    if (rc !== NVML_SUCCESS) return { ok: false, code: rc, reason: `nvmlInit_v2 failed: ${nvml.errorString(rc)}` };
    nvml.#initialised = true;
    const count = nvml.deviceCount();
    if (!count.ok) {
      nvml.close();
      return count;
    }
    for (let i = 0; i < count.value; i++) {
      const out: unknown[] = [null];
      const r = nvml.#call('nvmlDeviceGetHandleByIndex_v2', i, out);
      nvml.#devices.push(r === NVML_SUCCESS ? out[0] : undefined);
    }
    return { ok: true, value: nvml };
  }

  /** Whether this library has an entry point (old drivers lack some). */
  has(name: string): boolean {
    return this.#fns.has(name);
  }

  errorString(code: number): string {
    const fn = this.#fns.get('nvmlErrorString');
    const s = fn ? (fn(code) as string | null) : null;
    return s ? `${s} (NVML ${code})` : `NVML error ${code}`;
  }

  /** Ends NVML for this process; idempotent. */
  close(): void {
    if (!this.#initialised) return;
    this.#initialised = false;
    this.#call('nvmlShutdown');
  }

  deviceCount(): NvmlResult<number> {
    const out = [0];
    return this.#result(this.#call('nvmlDeviceGetCount_v2', out), () => out[0] as number);
  }

  get gpuCount(): number {
    return this.#devices.length;
  }

  driverVersion(): NvmlResult<string> {
    const buf = Buffer.alloc(80);
    return this.#result(this.#call('nvmlSystemGetDriverVersion', buf, buf.length), () => cString(buf));
  }

  /** CUDA version as nvidia-smi prints it, "12.4". */
  cudaVersion(): NvmlResult<string> {
    const out = [0];
    return this.#result(this.#call('nvmlSystemGetCudaDriverVersion_v2', out), () => {
      const v = out[0] as number;
      return `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
    });
  }

  name(i: number): NvmlResult<string> {
    const buf = Buffer.alloc(96);
    return this.#device(i, (d) => this.#result(this.#call('nvmlDeviceGetName', d, buf, buf.length), () => cString(buf)));
  }

  uuid(i: number): NvmlResult<string> {
    const buf = Buffer.alloc(96);
    return this.#device(i, (d) => this.#result(this.#call('nvmlDeviceGetUUID', d, buf, buf.length), () => cString(buf)));
  }

  /** The bus id as nvidia-smi prints it, "00000000:18:00.0". */
  pciBusId(i: number): NvmlResult<string> {
    return this.#device(i, (d) => {
      const out: { busId?: string }[] = [{}];
      return this.#result(this.#call('nvmlDeviceGetPciInfo_v3', d, out), () => out[0]?.busId ?? '');
    });
  }

  computeCapability(i: number): NvmlResult<string> {
    return this.#device(i, (d) => {
      const major = [0];
      const minor = [0];
      return this.#result(this.#call('nvmlDeviceGetCudaComputeCapability', d, major, minor), () => `${major[0]}.${minor[0]}`);
    });
  }

  /** Memory in bytes through the _v2 call, whose `used` leaves out the driver's reservation, as nvidia-smi does. */
  memory(i: number): NvmlResult<{ total: number; used: number }> {
    return this.#device(i, (d) => {
      const m = { version: MEMORY_V2_VERSION, total: 0, reserved: 0, free: 0, used: 0 };
      return this.#result(this.#call('nvmlDeviceGetMemoryInfo_v2', d, m), () => ({ total: Number(m.total), used: Number(m.used) }));
    });
  }

  /** Compute processes: pid and bytes used. */
  computeProcesses(i: number): NvmlResult<{ pid: number; usedBytes: number }[]> {
    return this.#device(i, (d) => {
      // The list can grow between the size query and the read: ask again, a few times.
      let capacity = 16;
      for (let attempt = 0; attempt < 4; attempt++) {
        const buf = Buffer.alloc(capacity * PROCESS_INFO_SIZE);
        const count = [capacity];
        const rc = this.#call('nvmlDeviceGetComputeRunningProcesses_v3', d, count, buf);
        if (rc === NVML_ERROR_INSUFFICIENT_SIZE) {
          capacity = Math.max(capacity * 2, (count[0] as number) + 8);
          continue;
        }
        return this.#result(rc, () => {
          const out: { pid: number; usedBytes: number }[] = [];
          for (let k = 0; k < (count[0] as number); k++) {
            const at = k * PROCESS_INFO_SIZE;
            out.push({ pid: buf.readUInt32LE(at), usedBytes: Number(buf.readBigUInt64LE(at + 8)) });
          }
          return out;
        });
      }
      return { ok: false, code: NVML_ERROR_INSUFFICIENT_SIZE, reason: this.errorString(NVML_ERROR_INSUFFICIENT_SIZE) };
    });
  }

  /** nvmlGpuTopologyLevel_t between two GPUs (the PCIe path only). */
  commonAncestor(a: number, b: number): NvmlResult<number> {
    return this.#device(a, (da) =>
      this.#device(b, (db) => {
        const out = [0];
        return this.#result(this.#call('nvmlDeviceGetTopologyCommonAncestor', da, db, out), () => out[0] as number);
      }),
    );
  }

  nvLinkActive(i: number, link: number): NvmlResult<boolean> {
    return this.#device(i, (d) => {
      const out = [0];
      return this.#result(this.#call('nvmlDeviceGetNvLinkState', d, link, out), () => out[0] === 1);
    });
  }

  nvLinkRemoteBusId(i: number, link: number): NvmlResult<string> {
    return this.#device(i, (d) => {
      const out: { busId?: string }[] = [{}];
      return this.#result(this.#call('nvmlDeviceGetNvLinkRemotePciInfo_v2', d, link, out), () => out[0]?.busId ?? '');
    });
  }

  /** Volatile double-bit (uncorrected) ECC errors since the driver loaded. */
  doubleBitEccErrors(i: number): NvmlResult<number> {
    return this.#device(i, (d) => {
      const out = [0];
      // NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0
      return this.#result(this.#call('nvmlDeviceGetTotalEccErrors', d, 1, 0, out), () => Number(out[0]));
    });
  }

  remappedRows(i: number): NvmlResult<RemappedRows> {
    return this.#device(i, (d) => {
      const c = [0];
      const u = [0];
      const p = [0];
      const f = [0];
      return this.#result(this.#call('nvmlDeviceGetRemappedRows', d, c, u, p, f), () => ({
        corrected: c[0] as number,
        uncorrected: u[0] as number,
        pending: p[0] !== 0,
        failure: f[0] !== 0,
      }));
    });
  }

  /** An event set with every GPU registered for `types`; GPUs that refuse are left out. */
  createEventSet(types: bigint): NvmlResult<{ set: NvmlEventSet; registered: number[] }> {
    const out: unknown[] = [null];
    const rc = this.#call('nvmlEventSetCreate', out);
    if (rc !== NVML_SUCCESS) return { ok: false, code: rc, reason: this.errorString(rc) };
    if (!this.has('nvmlEventSetWait_v2')) {
      this.#call('nvmlEventSetFree', out[0]);
      return { ok: false, code: NVML_ERROR_FUNCTION_NOT_FOUND, reason: 'this driver has no nvmlEventSetWait_v2' };
    }
    const registered: number[] = [];
    this.#devices.forEach((d, i) => {
      if (d !== undefined && this.#call('nvmlDeviceRegisterEvents', d, types, out[0]) === NVML_SUCCESS) registered.push(i);
    });
    return { ok: true, value: { set: out[0], registered } };
  }

  /**
   * Waits up to `timeoutMs` for an event on a worker thread (koffi's async
   * call), so the event loop never blocks on the driver. Resolves with the
   * event, or undefined on a timeout.
   */
  waitEvent(set: NvmlEventSet, timeoutMs: number): Promise<NvmlResult<NvmlEvent | undefined>> {
    const fn = this.#fns.get('nvmlEventSetWait_v2');
    if (!fn) return Promise.resolve({ ok: false, code: NVML_ERROR_FUNCTION_NOT_FOUND, reason: 'this driver has no nvmlEventSetWait_v2' });
    const buf = Buffer.alloc(EVENT_DATA_SIZE);
    return new Promise((resolve) => {
      fn.async(set, buf, timeoutMs, (err: unknown, rc: number) => {
        if (err) return resolve({ ok: false, code: -1, reason: errorMessage(err) });
        if (rc === NVML_ERROR_TIMEOUT) return resolve({ ok: true, value: undefined });
        if (rc !== NVML_SUCCESS) return resolve({ ok: false, code: rc, reason: this.errorString(rc) });
        const address = buf.readBigUInt64LE(0);
        const gpuIndex = this.#devices.findIndex((d) => d !== undefined && koffi.address(d) === address);
        resolve({ ok: true, value: { gpuIndex, type: buf.readBigUInt64LE(8), data: Number(buf.readBigUInt64LE(16)) } });
      });
    });
  }

  freeEventSet(set: NvmlEventSet): void {
    this.#call('nvmlEventSetFree', set);
  }

  #device<T>(i: number, f: (d: NvmlDevice) => NvmlResult<T>): NvmlResult<T> {
    const d = this.#devices[i];
    if (d === undefined) return { ok: false, code: 2, reason: `no handle for GPU ${i}` };
    return f(d);
  }

  #call(name: string, ...args: unknown[]): number {
    const fn = this.#fns.get(name);
    if (!fn) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return fn(...args) as number;
  }

  #result<T>(rc: number, value: () => T): NvmlResult<T> {
    if (rc === NVML_SUCCESS) return { ok: true, value: value() };
    return { ok: false, code: rc, reason: rc === NVML_ERROR_FUNCTION_NOT_FOUND ? 'not supported by this driver' : this.errorString(rc) };
  }
}

/** Not supported by this GPU or driver: a gap to report, not a fault. */
export function isUnsupported(r: { ok: false; code: number }): boolean {
  return r.code === NVML_ERROR_NOT_SUPPORTED || r.code === NVML_ERROR_FUNCTION_NOT_FOUND;
}

function cString(buf: Buffer): string {
  const end = buf.indexOf(0);
  return buf.toString('utf8', 0, end < 0 ? buf.length : end);
}

function firstLine(s: string): string {
  return s.split('\n')[0] ?? s;
}
