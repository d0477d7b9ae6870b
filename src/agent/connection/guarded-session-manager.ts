import type { Http2Session } from 'node:http2';
import { Http2SessionManager } from '@connectrpc/connect-node';

/**
 * connect-node's HTTP/2 session manager with one more guarantee: every
 * session it hands out keeps an 'error' listener for as long as it exists.
 *
 * The manager removes its own listeners when it leaves a session's state,
 * but a stream closing after that restarts the session's keep-alive ping,
 * and a GOAWAY's deferred destroy still raises its error: with no listener,
 * Node turns that 'error' event into an uncaught exception. Against a
 * control plane that accepts TCP and never answers, "PING timed out" killed
 * the agent this way (seen once in the fault campaign's
 * control-plane-faults scenario; connect-es issues 1768 and 1795, open at
 * @connectrpc/connect-node 2.1.2). The manager has already given up on the
 * session when such an error comes, so it is only told to `onLateError`.
 */
export class GuardedHttp2SessionManager extends Http2SessionManager {
  readonly #guarded = new WeakSet<Http2Session>();

  constructor(
    url: URL | string,
    pingOptions: ConstructorParameters<typeof Http2SessionManager>[1],
    http2SessionOptions: ConstructorParameters<typeof Http2SessionManager>[2],
    private readonly onLateError: (err: unknown) => void,
  ) {
    super(url, pingOptions, http2SessionOptions);
  }

  override async request(...args: Parameters<Http2SessionManager['request']>): ReturnType<Http2SessionManager['request']> {
    const stream = await super.request(...args);
    this.guard(stream.session);
    return stream;
  }

  /** Gives `session` its lasting listener, once. */
  guard(session: Http2Session | undefined): void {
    if (!session || this.#guarded.has(session)) return;
    this.#guarded.add(session);
    const onLateError = this.onLateError;
    session.on('error', function lateSessionError(err: unknown) {
      onLateError(err);
    });
  }
}
