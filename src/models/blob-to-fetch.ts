import type { BandwidthLimiter } from './bandwidth-limiter.js';

/*
 * What one blob download is given (the blob, where its bytes go, the
 * context it runs in) and the sizes that shape its transfer.
 */

/**
 * A file this large or more is fetched in parts of PART_BYTES, several at
 * once over their own connections (HTTP Range), as hf_transfer does: one
 * TCP stream to a CDN far away is held to a share of the link by its round
 * trip, several fill it. 16 MiB parts keep a part's request and slow start
 * small beside its transfer; a file of less than two parts gains nothing.
 */
export const PART_BYTES = 16 * 1024 * 1024;
export const RANGED_MIN_BYTES = 2 * PART_BYTES;
/**
 * A server whose TCP connect took less than this is near: one stream fills
 * what the pull can write (a window of 6 MiB, Linux's default tcp_rmem
 * most, over 5 ms is 1.2 GB/s), and a file comes from it in one stream,
 * asked for once the connect is timed (hub-stream.ts headersAt). Parts
 * fetched at once end together, and the hash, which must take the bytes
 * in order, then had three parts of each file left to read after the last
 * byte came: 180-390 ms of a 1.1 s pull of 128 MiB on this machine's
 * loopback; a first part and then the rest in a second stream still held
 * two connections per file where one does (bench 14b, issue 52, item 1).
 */
export const NEAR_RTT_MS = 5;
/** Parts of one file fetched at once (models.max_concurrent files at once, each with this many connections). */
export const CONNECTIONS_PER_FILE = 4;
/**
 * Below this a blob is not synced before its rename: the pull syncs them
 * all at once at its end, before it records the model complete, and checks
 * their digests again when it finds them after a pull that did not end
 * (pull-model.ts). Config, tokenizer and index files are many and small; one
 * fsync each cost more than their transfer.
 */
export const SMALL_BLOB_BYTES = 1024 * 1024;

export interface BlobToFetch {
  /** Repo path, for messages. */
  path: string;
  url: string;
  size: number;
  /** LFS sha256 to verify against; without it, the git blob sha1 `blobId`. */
  sha256?: string;
  blobId: string;
  /** Where the bytes go while they arrive, kept across a kill to resume from. */
  incompletePath: string;
  /** Where the verified blob is renamed to. */
  blobPath: string;
  /**
   * Where a ranged download records how many bytes from the start are
   * written without a gap (outside the repo folder, which huggingface_hub
   * scans): its parts ahead of that may leave holes at a crash, and a resume
   * goes on from the recorded prefix. Without it, the blob comes in one stream.
   */
  prefixPath?: string;
}

export interface DownloadProgress {
  /** Bytes of this file on disk so far. */
  bytes: number;
}

export interface DownloadContext {
  headers: Record<string, string>;
  limiter: BandwidthLimiter;
  signal: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
  /** Part size of a ranged download; PART_BYTES unless a test wants many parts of a small file. */
  partBytes?: number;
  /** NEAR_RTT_MS unless a test wants parts from its server on loopback (0: parts whatever the connect took and wherever the server is). */
  nearRttMs?: number;
  /** models.hub.redirect_hosts: the private hosts a redirect may reach (redirect-policy.ts). */
  redirectHosts?: readonly string[];
  /**
   * Resolved once the store may take this download's bytes (the pull's
   * record written incomplete, its folders made); rejected when it may not.
   * Awaited before anything of the file is written, truncated or created.
   */
  storeReady?: Promise<void>;
  /** The pull shares its event loop (PullContext.sharedLoop): no read in place. */
  sharedLoop?: boolean;
}
