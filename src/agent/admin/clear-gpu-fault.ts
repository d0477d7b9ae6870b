import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext } from '@connectrpc/connect';
import { type ClearGpuFaultRequest, type ClearGpuFaultResponse, ClearGpuFaultResponseSchema } from '../../gen/llmgw/v1/admin_pb.js';
import type { AdminBackend } from './admin-backend.js';
import { ADMIN_PEER } from './admin-peer.js';
import { toConnectError } from './connect-error.js';
import { auditAct } from './operator-audit.js';

/** Longest reason kept: it goes into the log and a GpuEvent's message. */
export const MAX_CLEAR_REASON_CHARS = 200;
/** The largest GPU index there can be (NVML's own limit is 64 devices per node; room to spare). */
const MAX_GPU_INDEX = 1023;

/**
 * AdminService.ClearGpuFault: `ctl gpu clear <index> [--reason]`. The
 * request is checked here, at the socket's edge; the caller's uid comes
 * from SO_PEERCRED (ADMIN_PEER), never from the request, so the audit line
 * says who really asked.
 */
export function clearGpuFault(backend: AdminBackend, req: ClearGpuFaultRequest, ctx: HandlerContext): ClearGpuFaultResponse {
  if (!Number.isInteger(req.gpuIndex) || req.gpuIndex < 0 || req.gpuIndex > MAX_GPU_INDEX) {
    throw new ConnectError(`gpu_index must be a GPU's index (0 to ${MAX_GPU_INDEX}), got ${req.gpuIndex}`, Code.InvalidArgument);
  }
  const reason = req.reason.trim();
  if (reason.length > MAX_CLEAR_REASON_CHARS) {
    throw new ConnectError(`reason: at most ${MAX_CLEAR_REASON_CHARS} characters, got ${reason.length}`, Code.InvalidArgument);
  }
  // One line in the log and in the event: a newline or control character would forge the next one.
  if (/[\p{Cc}]/u.test(reason)) throw new ConnectError('reason must be one line of printable text', Code.InvalidArgument);
  if (!backend.clearGpuFault) throw new ConnectError('this agent keeps no GPU faults to clear', Code.Unimplemented);
  auditAct(backend, ctx, { act: 'gpu clear', gpu: req.gpuIndex, detail: reason === '' ? undefined : reason });
  try {
    const { cleared, event } = backend.clearGpuFault(req.gpuIndex, reason, ctx.values.get(ADMIN_PEER)?.uid);
    return create(ClearGpuFaultResponseSchema, { cleared, event });
  } catch (err) {
    throw toConnectError(err);
  }
}
