import { Code, ConnectError } from '@connectrpc/connect';
import { describe, expect, it } from 'vitest';
import { toConnectError } from '../../../src/agent/admin/connect-error.js';
import { LlmgwError } from '../../../src/lib/errors.js';

describe('toConnectError', () => {
  it('gives each kind of LlmgwError its Connect code, so a runtime condition never reaches ctl as a usage error', () => {
    const codes = (['usage', 'failure', 'config', 'permission', 'unreachable'] as const).map((kind) => toConnectError(new LlmgwError(kind, 'x')).code);
    expect(codes).toEqual([Code.InvalidArgument, Code.FailedPrecondition, Code.FailedPrecondition, Code.PermissionDenied, Code.Unavailable]);
  });

  it('decides by instanceof: an Error that only calls itself LlmgwError is Internal', () => {
    const impostor = Object.assign(new Error('boom'), { name: 'LlmgwError', kind: 'usage' });
    expect(toConnectError(impostor).code).toBe(Code.Internal);
    const connect = new ConnectError('as is', Code.NotFound);
    expect(toConnectError(connect)).toBe(connect);
  });
});
