import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/*
 * A local HTTP server speaking the part of the Hugging Face Hub API a pull
 * uses: GET /api/models/{repo}/revision/{rev}?blobs=true and
 * GET /{repo}/resolve/{commit}/{file} with Range. It counts what it serves,
 * can trickle a file (to kill a pull in the middle of it) and flip a byte.
 * The tests' hub, and `llmgw dev up --engine vllm`'s (devModelRepo), so a
 * newcomer sees a model pulled into the node's store and started warm
 * without a network.
 */

export interface FakeFile {
  path: string;
  content: Buffer;
  /** Stored with LFS: listed with lfs.sha256, and the blob is named by it. */
  lfs: boolean;
}

export interface FakeRepo {
  commit: string;
  files: FakeFile[];
}

export interface ServedRequest {
  url: string;
  range: string | undefined;
  authorization: string | undefined;
}

/**
 * Digests of the hub's files, computed once per buffer: the hub names a file
 * by them in every listing and answer, and hashing 64 MiB again for each of a
 * pull's ranged parts made the hub, not the pull, what bench figure 14b
 * measured. A served file's content is never changed in place.
 */
const digests = new WeakMap<Buffer, { sha256?: string; blobId?: string }>();

function memo(b: Buffer, kind: 'sha256' | 'blobId', compute: () => string): string {
  const known = digests.get(b) ?? {};
  digests.set(b, known);
  known[kind] ??= compute();
  return known[kind];
}

export function sha256(b: Buffer | string): string {
  if (typeof b === 'string') return createHash('sha256').update(b).digest('hex');
  return memo(b, 'sha256', () => createHash('sha256').update(b).digest('hex'));
}

export function gitBlobId(b: Buffer): string {
  return memo(b, 'blobId', () => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex'));
}

/** A repo of `files` at a commit derived from its name. */
export function fakeRepo(name: string, files: FakeFile[]): FakeRepo {
  return { commit: createHash('sha1').update(name).digest('hex'), files };
}

/** Deterministic bytes: the same repo content in every run, so its sha256s are known. */
export function bytes(n: number, seed: number): Buffer {
  const b = Buffer.alloc(n);
  let x = seed * 2654435761;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

export class FakeHub {
  readonly repos = new Map<string, FakeRepo>();
  readonly requests: ServedRequest[] = [];
  /** file path → bytes per 20 ms tick: served slowly, for a kill to land mid-file. */
  readonly trickle = new Map<string, number>();
  /** file paths whose next N serves have one byte flipped (the file's middle byte, in whichever part holds it). */
  readonly corrupt = new Map<string, number>();
  /** File paths whose body from byte 0 is held back this many ms after its head: the parts after it arrive first. */
  readonly holdStart = new Map<string, number>();
  /** File paths whose bodies wait for this promise after their heads: a test opens the gate when it has seen what it waits for. */
  readonly gates = new Map<string, Promise<void>>();
  /** Range ignored: every file answered whole with 200, as some CDNs do. */
  noRanges = false;
  private server: Server | undefined;
  private readonly open = new Set<ServerResponse>();

  get url(): string {
    const addr = this.server?.address() as AddressInfo;
    return `http://127.0.0.1:${addr.port}`;
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => this.handle(req, res));
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
  }

  async stop(): Promise<void> {
    for (const res of this.open) res.destroy();
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }

  /** GETs of a file's bytes (resolve), by repo path. */
  downloads(path: string): ServedRequest[] {
    return this.requests.filter((r) => r.url.includes('/resolve/') && r.url.endsWith(`/${path}`));
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    this.requests.push({ url: url.pathname, range: req.headers.range, authorization: req.headers.authorization });
    const api = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
    if (api) {
      const repo = this.repos.get(api[1] as string);
      if (!repo) return void res.writeHead(404).end('{"error":"Repository not found"}');
      const siblings = repo.files.map((f) => ({
        rfilename: f.path,
        size: f.content.length,
        blobId: gitBlobId(f.content),
        ...(f.lfs ? { lfs: { sha256: sha256(f.content), size: f.content.length, pointerSize: 134 } } : {}),
      }));
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ id: api[1], sha: repo.commit, siblings }));
    }
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([0-9a-f]{40})\/(.+)$/.exec(url.pathname);
    const repo = resolve ? this.repos.get(resolve[1] as string) : undefined;
    const file = resolve && repo?.commit === resolve[2] ? repo.files.find((f) => f.path === decodeURIComponent(resolve[3] as string)) : undefined;
    if (!file) return void res.writeHead(404).end('not found');
    let body = file.content;
    const left = this.corrupt.get(file.path) ?? 0;
    if (left > 0) {
      this.corrupt.set(file.path, left - 1);
      body = Buffer.from(body);
      body[Math.floor(body.length / 2)] = (body[Math.floor(body.length / 2)] as number) ^ 0x01;
    }
    // bytes=a- and bytes=a-b (the pull's parts); anything else is served whole.
    const m = this.noRanges ? null : /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    const start = m ? Number(m[1]) : 0;
    const end = m?.[2] ? Math.min(body.length, Number(m[2]) + 1) : body.length;
    const headers: Record<string, string | number> = {
      'content-length': end - start,
      etag: `"${file.lfs ? sha256(file.content) : gitBlobId(file.content)}"`,
      'x-repo-commit': repo?.commit ?? '',
      'accept-ranges': 'bytes',
    };
    if (file.lfs) headers['x-linked-etag'] = `"${sha256(file.content)}"`;
    if (m) headers['content-range'] = `bytes ${start}-${end - 1}/${body.length}`;
    const held = start === 0 ? this.holdStart.get(file.path) : undefined;
    res.writeHead(m ? 206 : 200, headers);
    const gate = this.gates.get(file.path);
    if (gate !== undefined) {
      res.flushHeaders();
      this.open.add(res);
      void gate.then(() => {
        this.open.delete(res);
        if (!res.destroyed) res.end(body.subarray(start, end));
      });
      return;
    }
    if (held !== undefined) {
      res.flushHeaders();
      this.open.add(res);
      setTimeout(() => {
        this.open.delete(res);
        if (!res.destroyed) res.end(body.subarray(start, end));
      }, held);
      return;
    }
    const rest = body.subarray(start, end);
    const step = this.trickle.get(file.path);
    if (step === undefined) return void res.end(rest);
    this.open.add(res);
    let at = 0;
    const tick = () => {
      if (res.destroyed) return void this.open.delete(res);
      if (at >= rest.length) {
        this.open.delete(res);
        return void res.end();
      }
      res.write(rest.subarray(at, at + step));
      at += step;
      setTimeout(tick, 20);
    };
    tick();
  }
}

/**
 * The model `llmgw dev up --engine vllm` serves from its hub: the files the
 * vLLM double reads at start (config, tokenizer) and `shards` safetensors of
 * `shardMiB` MiB each, deterministic, so every run serves the same digests.
 */
export function devModelRepo(name: string, shards = 2, shardMiB = 16): FakeRepo {
  const json = (o: object) => Buffer.from(`${JSON.stringify(o)}\n`);
  const files: FakeFile[] = [
    { path: 'config.json', content: json({ architectures: ['LlamaForCausalLM'], model_type: 'llama', llmgw: 'dev model' }), lfs: false },
    { path: 'generation_config.json', content: json({ max_new_tokens: 16 }), lfs: false },
    { path: 'tokenizer_config.json', content: json({ model_max_length: 2048 }), lfs: false },
    { path: 'tokenizer.json', content: json({ version: '1.0', model: { type: 'BPE' } }), lfs: false },
  ];
  for (let i = 1; i <= shards; i++) {
    const n = String(shards).padStart(5, '0');
    files.push({ path: `model-${String(i).padStart(5, '0')}-of-${n}.safetensors`, content: bytes(shardMiB * 1024 * 1024, 7 + i), lfs: true });
  }
  return fakeRepo(name, files);
}
