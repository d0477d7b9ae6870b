import { Code, ConnectError } from '@connectrpc/connect';
import { type ErrorKind, errorMessage, LlmgwError } from '../../lib/errors.js';

/**
 * The Connect code for each kind of LlmgwError, so ctl maps it back to the
 * right exit status (admin-call-error.ts): a bad request is InvalidArgument
 * (exit 2), a runtime condition such as a shard in the wrong state is
 * FailedPrecondition (exit 1), never a usage error. Anything that is not an
 * LlmgwError is a bug: Internal.
 */
const CONNECT_CODE_BY_KIND: Record<ErrorKind, Code> = {
  usage: Code.InvalidArgument,
  failure: Code.FailedPrecondition,
  config: Code.FailedPrecondition,
  permission: Code.PermissionDenied,
  unreachable: Code.Unavailable,
};

export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof LlmgwError) return new ConnectError(err.message, CONNECT_CODE_BY_KIND[err.kind]);
  return new ConnectError(errorMessage(err), Code.Internal);
}
