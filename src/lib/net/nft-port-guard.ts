import { execFile } from 'node:child_process';
import { errorMessage, failure } from '../errors.js';
import { spawnTurn } from '../process/spawn-turn.js';

/*
 * A loopback guard on TCP ports: connections a local process opens to a
 * guarded port are refused (TCP reset) unless the process's uid is one the
 * port allows. Only what local sockets send is judged (the output hook, on
 * the loopback device, where every connection to one of this host's own
 * addresses goes): a request from another host arrives through the input
 * hook and passes untouched, so a router keeps its direct path to the
 * engine. One nftables table, `inet llmgw` by default, holds one rule and
 * two sets; a port's guard is elements of the sets, so guarding or
 * releasing one port never touches another's, and the rule and the sets
 * survive an agent restart with the engines they guard.
 */

/** Limit of one nft run; it answers in milliseconds. */
const NFT_TIMEOUT_MS = 10_000;
/** nft's output read at most; a listing of the two sets is a few KiB per thousand ports. */
const NFT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024;

export interface NftPortGuardOptions {
  /** The nft executable; 'nft' from PATH by default. */
  nft?: string;
  /** The table's name (family inet); 'llmgw' by default. */
  table?: string;
}

/** A uid as nft lists it: a number, or an account's name when it printed one. */
type ListedUid = number | string;

const NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;

export class NftPortGuard {
  readonly #nft: string;
  readonly #table: string;
  /** One nft change at a time in this process: a release read before a guard was applied would delete it. */
  #last: Promise<unknown> = Promise.resolve();

  constructor(opts: NftPortGuardOptions = {}) {
    this.#nft = opts.nft ?? 'nft';
    this.#table = opts.table ?? 'llmgw';
    if (!NAME.test(this.#table)) throw failure(`nft table name ${JSON.stringify(this.#table)} is not a name`);
  }

  /**
   * Guards `port`: from here only `uids` connect to it from this host. The
   * table is made (or its rule made again) in the same transaction, so the
   * port is never listed without the rule that refuses. Rejects with one
   * line when nft is missing or refuses (no CAP_NET_ADMIN, no nf_tables).
   */
  guard(port: number, uids: readonly number[]): Promise<void> {
    checkPort(port);
    const allowed = [...new Set(uids)];
    if (allowed.length === 0 || !allowed.every((u) => Number.isInteger(u) && u >= 0)) throw failure(`nft guard of port ${port}: no uid to allow`);
    return this.#serially(async () => {
      const stale = ((await this.#state())?.pairs ?? []).filter(([p]) => p === port);
      const t = `inet ${this.#table}`;
      const lines = [
        ...this.#setup(),
        `add element ${t} guarded_ports { ${port} }`,
        ...stale.map(([p, u]) => `delete element ${t} allowed_uids { ${p} . ${u} }`),
        `add element ${t} allowed_uids { ${allowed.map((u) => `${port} . ${u}`).join(', ')} }`,
      ];
      await this.#run(['-f', '-'], lines.join('\n'));
    });
  }

  /**
   * Lifts the guard of `port`; nothing to do (one nft listing) when it has
   * none or the table is absent, which is also what a node without nft gets.
   */
  release(port: number): Promise<void> {
    checkPort(port);
    return this.#serially(async () => {
      const state = await this.#state();
      const mine = (state?.pairs ?? []).filter(([p]) => p === port);
      if (!state || (!state.ports.includes(port) && mine.length === 0)) return;
      const t = `inet ${this.#table}`;
      // Added then deleted: a delete of an element that is not there fails the whole transaction.
      const lines = [`add element ${t} guarded_ports { ${port} }`, `delete element ${t} guarded_ports { ${port} }`, ...mine.map(([p, u]) => `delete element ${t} allowed_uids { ${p} . ${u} }`)];
      await this.#run(['-f', '-'], lines.join('\n'));
    });
  }

  /** The guarded ports with the uids each allows (port → uids); empty when the table is absent. */
  async guarded(): Promise<Map<number, ListedUid[]>> {
    const out = new Map<number, ListedUid[]>();
    const state = await this.#state();
    for (const p of state?.ports ?? []) out.set(p, []);
    for (const [p, u] of state?.pairs ?? []) out.get(p)?.push(u);
    return out;
  }

  #setup(): string[] {
    const t = `inet ${this.#table}`;
    return [
      `add table ${t}`,
      `add set ${t} guarded_ports { type inet_service; }`,
      `add set ${t} allowed_uids { type inet_service . uid; }`,
      `add chain ${t} output { type filter hook output priority 0; policy accept; }`,
      // Made again each time, in the same transaction: never two copies, never a moment without it.
      `flush chain ${t} output`,
      `add rule ${t} output oifname "lo" tcp dport @guarded_ports tcp dport . meta skuid != @allowed_uids reject with tcp reset`,
    ];
  }

  /** The table's two sets in one listing: guarded ports and allowed (port, uid) pairs; undefined when the table (or nft) is absent. */
  async #state(): Promise<{ ports: number[]; pairs: Array<[number, ListedUid]> } | undefined> {
    let text: string;
    try {
      text = await this.#run(['-j', '-n', 'list', 'table', 'inet', this.#table]);
    } catch {
      return undefined;
    }
    const doc = JSON.parse(text) as { nftables?: Array<{ set?: { name?: string; elem?: unknown[] } }> };
    const elems = (name: string) => doc.nftables?.find((x) => x.set?.name === name)?.set?.elem ?? [];
    const ports = elems('guarded_ports').filter((p): p is number => typeof p === 'number');
    const pairs: Array<[number, ListedUid]> = [];
    for (const e of elems('allowed_uids')) {
      const c = (e as { concat?: unknown })?.concat;
      if (!Array.isArray(c) || c.length !== 2) continue;
      const [p, u] = c as [unknown, unknown];
      if (typeof p !== 'number') continue;
      if (typeof u === 'number' || (typeof u === 'string' && NAME.test(u))) pairs.push([p, u]);
    }
    return { ports, pairs };
  }

  #serially<T>(run: () => Promise<T>): Promise<T> {
    const next = this.#last.then(run, run);
    this.#last = next.catch(() => undefined);
    return next;
  }

  /** Runs nft with `input` on its stdin; resolves with its stdout, rejects with one line naming what it said. */
  async #run(argv: string[], input = ''): Promise<string> {
    await spawnTurn();
    return new Promise((resolve, reject) => {
      const child = execFile(this.#nft, argv, { timeout: NFT_TIMEOUT_MS, encoding: 'utf8', maxBuffer: NFT_MAX_OUTPUT_BYTES }, (err, stdout, stderr) => {
        if (!err) {
          resolve(stdout);
          return;
        }
        const e = err as { code?: unknown; killed?: boolean };
        if (e.code === 'ENOENT') reject(failure(`${this.#nft} is not installed (apt-get install nftables)`));
        else if (e.killed) reject(failure(`${this.#nft} did not answer within ${NFT_TIMEOUT_MS / 1000}s`));
        else reject(failure(`${this.#nft} ${argv.join(' ')}: ${firstError(stderr) || errorMessage(err)}`));
      });
      child.stdin?.on('error', () => undefined);
      child.stdin?.end(input);
    });
  }
}

function checkPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw failure(`nft guard: ${port} is not a TCP port`);
}

/** nft's first error line ("Error: Could not process rule: Operation not permitted"), without the script it echoes. */
function firstError(stderr: string): string {
  const line = stderr.split('\n').find((l) => /Error:/.test(l)) ?? stderr.split('\n').find((l) => l.trim() !== '') ?? '';
  return line.replace(/^.*?Error:\s*/, '').trim().slice(0, 200);
}
