import { join } from 'node:path';
import { execa } from 'execa';
import { onTestFinished } from 'vitest';

/**
 * A datagram socket standing in for systemd's NOTIFY_SOCKET. Node has no
 * Unix datagram sockets, so python3 receives and prints each datagram as one
 * JSON line. It ends with the test, or through `onEnd` when given (one made
 * in beforeAll, ended in afterAll).
 */
export function listenNotifySocket(dir: string, onEnd: (fn: () => Promise<void>) => void = onTestFinished): { path: string; received: () => string[]; ready: Promise<void> } {
  const path = join(dir, 'notify.sock');
  const script = [
    'import socket, json, sys',
    's = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)',
    `s.bind(${JSON.stringify(path)})`,
    'print("listening", flush=True)',
    'while True:',
    '    print(json.dumps(s.recv(65536).decode()), flush=True)',
  ].join('\n');
  const proc = execa('python3', ['-c', script], { reject: false, buffer: false });
  const lines: string[] = [];
  let resolveReady: () => void = () => {};
  const ready = new Promise<void>((r) => {
    resolveReady = r;
  });
  proc.stdout?.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n').filter(Boolean)) {
      if (line === 'listening') resolveReady();
      else lines.push(JSON.parse(line) as string);
    }
  });
  onEnd(async () => {
    proc.kill('SIGKILL');
    await proc;
  });
  return { path, received: () => [...lines], ready };
}
