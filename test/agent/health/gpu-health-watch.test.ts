import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync, closeSync, constants } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { type GpuEvent, GpuEventKind } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { GpuHealthWatch, type GpuHealthWatchOptions } from '../../../src/agent/health/gpu-health-watch.js';
import { NvmlLibrary } from '../../../src/agent/discovery/nvml/nvml-library.js';
import { buildFakeNvml, type FakeNvmlVariant, fakeNvmlUnavailable } from '../discovery/fake-nvml.js';

const tmp = mkdtempSync(join(tmpdir(), 'llmgw-health-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
afterEach(() => {
  vi.unstubAllEnvs();
});

const WAIT = { timeout: 10_000, interval: 10 };
// GPU 3 of hgx-h100x8 is at 00000000:5D:00.0.
const XID79_KMSG = "4,2071,{usec},-;NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n";

/** A watch on the fake NVML (hgx-h100x8), with a control file to inject faults and a kernel-log file; closed after the test. */
function setup(opts: { variant?: FakeNvmlVariant; kmsg?: 'file' | 'fifo' | 'none'; watch?: Partial<GpuHealthWatchOptions> } = {}) {
  const dir = mkdtempSync(join(tmp, 't-'));
  const control = join(dir, 'control');
  writeFileSync(control, '');
  vi.stubEnv('LLMGW_FAKE_GPUS', 'hgx-h100x8');
  vi.stubEnv('LLMGW_FAKE_NVML_CONTROL', control);
  const opened = NvmlLibrary.open(buildFakeNvml(opts.variant ?? 'current'));
  if (!opened.ok) throw new Error(opened.reason);
  const nvml = opened.value;
  let kmsgPath = '';
  if (opts.kmsg === 'file' || opts.kmsg === undefined) {
    kmsgPath = join(dir, 'kmsg');
    writeFileSync(kmsgPath, 'an old line from before the agent started\n');
  } else if (opts.kmsg === 'fifo') {
    kmsgPath = join(dir, 'kmsg.fifo');
    execFileSync('mkfifo', [kmsgPath]);
  }
  const lines: { msg: string }[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  const watch = new GpuHealthWatch({
    nvml,
    kmsgPath,
    pollIntervalMs: 50,
    eventWaitMs: 50,
    kmsgPollMs: 20,
    shardsOn: (i) => (i === 3 ? ['shard-on-3'] : []),
    logger,
    ...opts.watch,
  });
  const events: GpuEvent[] = [];
  watch.on('event', (e) => events.push(e));
  onTestFinished(async () => {
    await watch.close();
    nvml.close();
  });
  const inject = (line: string) => appendFileSync(control, `${line}\n`);
  return { watch, nvml, events, inject, control, kmsgPath, lines };
}

describe.skipIf(fakeNvmlUnavailable() !== undefined)('GpuHealthWatch', () => {
  it('turns an NVML Xid 79 event into a GpuEvent naming the GPU, its shards and the cause, and holds the GPU lost', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    expect(watch.faultOf(3)).toBeUndefined();
    inject('xid 3 79');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    const e = events[0] as GpuEvent;
    expect(e).toMatchObject({
      gpuIndex: 3,
      gpuUuid: 'GPU-3f1c0a5e-8b2d-4c7a-9e61-000000000003',
      kind: GpuEventKind.XID,
      xid: 79,
      message: 'Xid 79: GPU has fallen off the bus',
      source: 'nvml',
      shardIds: ['shard-on-3'],
    });
    expect(watch.describeFault(3)).toBe('GPU 3: Xid 79: GPU has fallen off the bus');
    expect(watch.faultOf(2)).toBeUndefined();
    const gpus = [{ index: 3, healthy: true, error: '' }, { index: 2, healthy: true, error: '' }] as never[];
    watch.markInventory(gpus);
    expect(gpus).toEqual([
      { index: 3, healthy: false, error: 'Xid 79: GPU has fallen off the bus' },
      { index: 2, healthy: true, error: '' },
    ]);
    expect(watch.recentEvents(3)).toEqual([e]);
  });

  it('reads the same Xid from the kernel log alone (a file, NVML without events), ignoring lines from before it started', async () => {
    const { watch, events, kmsgPath } = setup({ variant: 'old', kmsg: 'file' });
    await watch.start();
    appendFileSync(kmsgPath, 'unrelated: usb 1-1: new device\n');
    appendFileSync(kmsgPath, XID79_KMSG.replace('{usec}', String(Number.MAX_SAFE_INTEGER)));
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 3, kind: GpuEventKind.XID, xid: 79, source: 'kmsg', message: 'Xid 79: GPU has fallen off the bus' });
    expect(watch.describeFault(3)).toBe('GPU 3: Xid 79: GPU has fallen off the bus');
  });

  it('reads the kernel log from a FIFO, and skips /dev/kmsg records stamped before it started', async () => {
    const { watch, events, kmsgPath } = setup({ variant: 'old', kmsg: 'fifo' });
    await watch.start();
    const fd = openSync(kmsgPath, constants.O_WRONLY);
    onTestFinished(() => closeSync(fd));
    writeSync(fd, XID79_KMSG.replace('{usec}', '1'));
    writeSync(fd, "6,2072,99999999999999,-;NVRM: Xid (PCI:0000:18:00): 48, pid=77, name=python, An uncorrectable double bit error\n");
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 0, xid: 48, source: 'kmsg', message: 'Xid 48: double-bit ECC error' });
    // The Xid 79 record was older than the watch: GPU 3 stays healthy.
    expect(watch.faultOf(3)).toBeUndefined();
  });

  it('polls a lost GPU (NVML_ERROR_GPU_IS_LOST) and holds it lost while NVML says so; answering again is a reset (issue 28)', async () => {
    const { watch, events, inject, control } = setup({ kmsg: 'none' });
    await watch.start();
    inject('lost 5');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.GPU_LOST]), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 5, source: 'poll' });
    expect(watch.describeFault(5)).toMatch(/^GPU 5: GPU is lost \(NVML_ERROR_GPU_IS_LOST\)/);
    await new Promise((r) => setTimeout(r, 300));
    expect(watch.faultOf(5)?.kind).toBe(GpuEventKind.GPU_LOST);
    expect(events).toHaveLength(1);
    writeFileSync(control, '');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.GPU_LOST, GpuEventKind.RESET]), WAIT);
    expect(watch.faultOf(5)).toBeUndefined();
  });

  it('reports a double-bit ECC error from the NVML event, once', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('dbe 1');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 1, kind: GpuEventKind.ECC_DOUBLE_BIT, message: '1 double-bit ECC error since the driver loaded; drain the GPU and reset it' });
    await new Promise((r) => setTimeout(r, 300));
    // The poll sees the same count: no second event.
    expect(events).toHaveLength(1);
    expect(watch.faultOf(1)?.kind).toBe(GpuEventKind.ECC_DOUBLE_BIT);
  });

  it('reports a pending row remap and a remap failure from the poll, and CLEARED when the poll reads the GPU clean', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('remap 2 pending');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.ROW_REMAP_PENDING]), WAIT);
    expect(watch.describeFault(2)).toBe('GPU 2: row remap pending: a memory row awaits remapping, which needs a GPU reset');
    inject('remap 2 clear');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.ROW_REMAP_PENDING, GpuEventKind.CLEARED]), WAIT);
    expect(watch.faultOf(2)).toBeUndefined();
    inject('remap 6 failure');
    await vi.waitFor(() => expect(events.at(-1)).toMatchObject({ gpuIndex: 6, kind: GpuEventKind.ROW_REMAP_FAILURE }), WAIT);
  });

  it('reports an NVLink that drops as NVLINK_DOWN, and CLEARED when it is back', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('nvlink 4 7 down');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 4, kind: GpuEventKind.NVLINK_DOWN, message: 'NVLink link 7 down (17 of 18 active)', source: 'poll' });
    inject('nvlink 4 7 up');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.NVLINK_DOWN, GpuEventKind.CLEARED]), WAIT);
    expect(watch.faultOf(4)).toBeUndefined();
  });

  it('treats the entry points an old driver lacks as not supported: no events, the poll and the kernel log still work', async () => {
    const { watch, events, inject, lines, kmsgPath } = setup({ variant: 'old', kmsg: 'file' });
    await watch.start();
    expect(lines.map((l) => l.msg)).toContain('NVML events unavailable: GPU faults come from the poll and the kernel log only');
    inject('dbe 4');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 4, kind: GpuEventKind.ECC_DOUBLE_BIT, source: 'poll' });
    appendFileSync(kmsgPath, 'NVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus.\n');
    await vi.waitFor(() => expect(events).toHaveLength(2), WAIT);
    expect(events[1]).toMatchObject({ gpuIndex: 3, xid: 79, source: 'kmsg' });
  });

  it('holds no fault for an application Xid (13), but says it happened', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('xid 0 13');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    expect(events[0]).toMatchObject({ gpuIndex: 0, xid: 13, message: 'Xid 13: graphics engine exception' });
    expect(watch.faultOf(0)).toBeUndefined();
  });

  it('close() ends a pending event wait and frees the event set; no wait runs after it', async () => {
    const { watch } = setup({ kmsg: 'none', watch: { eventWaitMs: 100 } });
    await watch.start();
    await vi.waitFor(() => expect(watch.waitTimeouts).toBeGreaterThan(0), WAIT);
    await watch.close();
    const after = watch.waitTimeouts;
    await new Promise((r) => setTimeout(r, 250));
    expect(watch.waitTimeouts).toBe(after);
  });

  it('keeps the thread count flat over 1,000 event-wait timeouts', { timeout: 120_000 }, async () => {
    const { watch } = setup({ kmsg: 'none', watch: { eventWaitMs: 1, pollIntervalMs: 60_000 } });
    const threads = () => Number(/^Threads:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
    await watch.start();
    // The worker pool starts with the first waits.
    await vi.waitFor(() => expect(watch.waitTimeouts).toBeGreaterThanOrEqual(20), { timeout: 60_000, interval: 5 });
    const before = threads();
    await vi.waitFor(() => expect(watch.waitTimeouts).toBeGreaterThanOrEqual(1020), { timeout: 110_000, interval: 20 });
    expect(threads()).toBeLessThanOrEqual(before);
  });
});

describe.skipIf(fakeNvmlUnavailable() !== undefined)('GpuHealthWatch: how faults clear, and the GPU set it follows', () => {
  it('clears a GPU NVML called lost once it answers again under the same UUID (a reset): RESET, every fault gone', async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('xid 1 48');
    inject('lost 1');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.XID, GpuEventKind.GPU_LOST]), WAIT);
    inject('reset 1');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toContain(GpuEventKind.RESET), WAIT);
    expect(events.at(-1)?.message).toMatch(/^GPU reset: NVML answers for it again under the same UUID; cleared: .*Xid 48.*GPU is lost|^GPU reset: .*cleared: .*GPU is lost.*Xid 48/);
    expect(watch.faultOf(1)).toBeUndefined();
  });

  it('keeps a lost GPU lost when a scan lists it with no UUID (it cannot be read while lost), and reports its reset', async () => {
    const { watch, nvml, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    const read = (r: { ok: boolean; value?: string }) => (r.ok ? (r.value as string) : '');
    const asScanned = [0, 1, 2, 3, 4, 5, 6, 7].map((index) => ({ index, uuid: read(nvml.uuid(index)), pciBusId: read(nvml.pciBusId(index)) }));
    inject('lost 1');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.GPU_LOST]), WAIT);
    // The rescan while it is lost: GPU 1 is there, its UUID and bus id unreadable.
    watch.setGpus(asScanned.map((g) => (g.index === 1 ? { index: 1, uuid: '', pciBusId: '' } : g)));
    expect(watch.faultOf(1)?.message).toMatch(/GPU is lost/);
    inject('reset 1');
    await vi.waitFor(() => expect(events.map((e) => e.kind)).toEqual([GpuEventKind.GPU_LOST, GpuEventKind.RESET]), WAIT);
    expect(events.at(-1)?.message).toMatch(/^GPU reset: NVML answers for it again under the same UUID/);
  });

  it('keeps an Xid 79 only the kernel log reported while NVML (without events) answers: NVML answering is no reset', async () => {
    const { watch, events, kmsgPath } = setup({ variant: 'old', kmsg: 'file' });
    await watch.start();
    appendFileSync(kmsgPath, 'NVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus.\n');
    await vi.waitFor(() => expect(events).toHaveLength(1), WAIT);
    await new Promise((r) => setTimeout(r, 300));
    expect(watch.faultOf(3)?.xid).toBe(79);
    expect(events).toHaveLength(1);
  });

  it('takes NVML\'s word over the kernel log where NVML reports events (security review 3, S7): a forged Xid 79 counts for nothing, a GPU NVML calls lost is lost', async () => {
    const { watch, events, kmsgPath, lines, inject } = setup({ kmsg: 'file' });
    await watch.start();
    // What a local user's failed overlayfs mount can get into the kernel log, as the driver writes it.
    appendFileSync(kmsgPath, XID79_KMSG.replace('{usec}', String(Number.MAX_SAFE_INTEGER)));
    await vi.waitFor(() => expect(lines.map((l) => l.msg)).toContain("kernel log reports an Xid that NVML, which reports this node's Xids, did not: not counted (NVML answers for the GPU)"), WAIT);
    expect(events).toEqual([]);
    expect(watch.faultOf(3)).toBeUndefined();
    // The same line while NVML says the GPU is lost: lost.
    inject('lost 3');
    appendFileSync(kmsgPath, XID79_KMSG.replace('{usec}', String(Number.MAX_SAFE_INTEGER)));
    await vi.waitFor(() => expect(watch.faultOf(3)?.kind).toBe(GpuEventKind.GPU_LOST), WAIT);
  });

  it('holds a fault the inventory scan reads when there is no NVML to poll (nvidia-smi\'s "GPU requires reset"): logged, an event, cleared by the scan or an operator (walkthrough 3, item 4)', async () => {
    const gpu = (index: number, discoveryFault?: string) => ({ index, uuid: `GPU-${index}`, pciBusId: `00000000:1${index}:00.0`, ...(discoveryFault ? { discoveryFault } : {}) });
    const { watch, events, lines } = setup({ kmsg: 'none', watch: { nvml: undefined, gpus: [gpu(0), gpu(2, 'GPU requires reset')] } });
    await watch.start();
    expect(events).toEqual([expect.objectContaining({ gpuIndex: 2, kind: GpuEventKind.GPU_LOST, message: 'GPU requires reset', source: 'discovery' })]);
    expect(lines.some((l) => l.msg === 'GPU fault')).toBe(true);
    expect(watch.describeFault(2)).toBe('GPU 2: GPU requires reset');
    // The next scan reads it sound: cleared, and said.
    watch.setGpus([gpu(0), gpu(2)]);
    expect(events.at(-1)).toMatchObject({ gpuIndex: 2, kind: GpuEventKind.CLEARED, source: 'discovery' });
    expect(watch.faultOf(2)).toBeUndefined();
    // Faulty again; an operator clears it (ctl gpu clear no longer says it had none).
    watch.setGpus([gpu(0), gpu(2, 'GPU requires reset')]);
    expect(watch.clearByOperator(2, 'uid 0')).toEqual(['GPU requires reset']);
  });

  it("clears every fault of a GPU for an operator, saying who and why; nothing to clear sends nothing", async () => {
    const { watch, events, inject } = setup({ kmsg: 'none' });
    await watch.start();
    inject('xid 2 94');
    await vi.waitFor(() => expect(watch.faultOf(2)?.xid).toBe(94), WAIT);
    expect(watch.clearByOperator(2, 'uid 0: reset by hand')).toEqual(['Xid 94: contained ECC error']);
    expect(events.at(-1)).toMatchObject({ gpuIndex: 2, kind: GpuEventKind.CLEARED_BY_OPERATOR, source: 'operator' });
    expect(events.at(-1)?.message).toBe('cleared by uid 0: reset by hand; cleared: Xid 94: contained ECC error');
    expect(watch.faultOf(2)).toBeUndefined();
    const before = events.length;
    expect(watch.clearByOperator(2, 'uid 0')).toEqual([]);
    expect(events).toHaveLength(before);
  });

  it('follows the GPUs the inventory lists: a GPU added later is watched, one that left is not, one back after being lost is reset', async () => {
    const gpu = (index: number, uuid: string, pciBusId: string) => ({ index, uuid, pciBusId });
    const g3 = gpu(3, 'GPU-3', '00000000:5D:00.0');
    const { watch, events, kmsgPath, lines } = setup({ kmsg: 'file', watch: { nvml: undefined, gpus: [gpu(0, 'GPU-0', '00000000:18:00.0')] } });
    await watch.start();
    const xid = (n: number) => appendFileSync(kmsgPath, `NVRM: Xid (PCI:0000:5d:00): ${n}, something.\n`);
    xid(94);
    await vi.waitFor(() => expect(lines.map((l) => l.msg)).toContain('kernel log reports an Xid for a PCI device that is no GPU of this node'), WAIT);
    expect(events).toEqual([]);
    watch.setGpus([gpu(0, 'GPU-0', '00000000:18:00.0'), g3]);
    xid(79);
    await vi.waitFor(() => expect(watch.faultOf(3)?.xid).toBe(79), WAIT);
    // It falls off the bus and leaves the inventory; it comes back under the same UUID: reset.
    watch.setGpus([gpu(0, 'GPU-0', '00000000:18:00.0')]);
    expect(watch.faultOf(3)?.xid).toBe(79);
    watch.setGpus([gpu(0, 'GPU-0', '00000000:18:00.0'), g3]);
    expect(events.at(-1)).toMatchObject({ gpuIndex: 3, kind: GpuEventKind.RESET });
    expect(watch.faultOf(3)).toBeUndefined();
    // Another card at index 3: the old one's faults are not its own.
    xid(79);
    await vi.waitFor(() => expect(watch.faultOf(3)).toBeDefined(), WAIT);
    watch.setGpus([gpu(0, 'GPU-0', '00000000:18:00.0'), gpu(3, 'GPU-other', '00000000:5D:00.0')]);
    expect(watch.faultOf(3)).toBeUndefined();
  });
});
