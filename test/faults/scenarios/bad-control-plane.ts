import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { create, toBinary } from '@bufbuild/protobuf';
import { ControlMessageSchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

/**
 * Control planes that misbehave on purpose, listening where the real one
 * was. Each counts what the agent did to it, so a scenario can tell a
 * retry with backoff from a hot loop.
 */
export type BadControlPlaneKind =
  /** Accepts TCP and never sends a byte: not even the HTTP/2 preface. */
  | 'silent'
  /** Answers the stream, reads Register, then ends the stream cleanly (Connect end-of-stream, no error). */
  | 'close-after-register'
  /** Answers the stream, reads Register, then resets it (RST_STREAM). */
  | 'reset-after-register'
  /** A valid HTTP/2 response whose body is random bytes, not Connect envelopes. */
  | 'garbage-body'
  /** Random bytes on the TCP connection instead of HTTP/2 at all. */
  | 'garbage-tcp'
  /** Answers the stream with response headers and then never sends a message (pings still answered). */
  | 'silent-stream'
  /** Acks Register properly, then sends the start of a message that claims to be 2 GiB long. */
  | 'huge-frame-after-ack';

export interface BadControlPlane {
  kind: BadControlPlaneKind;
  /** TCP connections accepted so far. */
  connections(): number;
  /** HTTP/2 streams (Connect calls) opened so far. */
  streams(): number;
  close(): Promise<void>;
}

/** Connect's end-of-stream envelope (flags 0b10) with an empty JSON object: a clean end, no error. */
const END_STREAM_OK = Buffer.concat([Buffer.from([0x02, 0, 0, 0, 2]), Buffer.from('{}')]);

function envelope(payload: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

export async function startBadControlPlane(kind: BadControlPlaneKind, port: number): Promise<BadControlPlane> {
  let connections = 0;
  let streams = 0;
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    connections++;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('close', () => sockets.delete(socket));
  };

  let server: net.Server | http2.Http2Server;
  if (kind === 'silent' || kind === 'garbage-tcp') {
    server = net.createServer((socket) => {
      track(socket);
      if (kind === 'garbage-tcp') socket.write(randomBytes(4096));
    });
  } else {
    const h2 = http2.createServer();
    h2.on('connection', track);
    h2.on('sessionError', () => {});
    h2.on('stream', (stream) => {
      streams++;
      stream.on('error', () => {});
      stream.respond({ ':status': 200, 'content-type': 'application/connect+proto' });
      if (kind === 'garbage-body') {
        stream.write(randomBytes(2048));
        return;
      }
      if (kind === 'silent-stream') return;
      if (kind === 'huge-frame-after-ack') {
        stream.once('data', () => {
          stream.write(envelope(toBinary(ControlMessageSchema, create(ControlMessageSchema, { messageId: 1n, msg: { case: 'ack', value: { messageId: 1n, ok: true } } }))));
          // flags 0, length 0x7fffffff, and then a trickle that never completes it.
          stream.write(Buffer.from([0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3]));
        });
        return;
      }
      // Right after the first request bytes (Register) arrive.
      stream.once('data', () => {
        if (kind === 'close-after-register') stream.end(END_STREAM_OK);
        else stream.close(http2.constants.NGHTTP2_CANCEL);
      });
    });
    server = h2;
  }
  for (let attempt = 0; ; attempt++) {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, '127.0.0.1', () => {
          server.off('error', reject);
          resolve();
        });
      });
      break;
    } catch (err) {
      if (attempt > 40) throw err;
      await sleep(50);
    }
  }
  return {
    kind,
    connections: () => connections,
    streams: () => streams,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
