/**
 * The hub double in a process of its own (hub-process.ts starts it): its
 * serving must not share the loop of the process whose loop is measured.
 * Serves acme/big (a config and HUB_FILES LFS files of HUB_MIB MiB) and
 * prints one JSON line: its URL and each LFS file's path and sha256.
 */
import { FakeHub, bytes, fakeRepo, sha256 } from '../../src/sim/sim-hub.js';

const MiB = 1024 * 1024;
const files = Number(process.env.HUB_FILES ?? 2);
const mib = Number(process.env.HUB_MIB ?? 256);
const weights = Array.from({ length: files }, (_, i) => ({ path: `model-${i}.safetensors`, content: bytes(mib * MiB, 40 + i), lfs: true }));
const hub = new FakeHub();
hub.repos.set('acme/big', fakeRepo('acme/big', [{ path: 'config.json', content: Buffer.from('{"a":1}\n'), lfs: false }, ...weights]));
await hub.start();
// Hashed before the URL is given (sha256 remembers it): the first listing would otherwise hash on the hub's loop mid-pull.
const listed = weights.map((f) => ({ path: f.path, sha256: sha256(f.content) }));
process.stdout.write(`${JSON.stringify({ url: hub.url, files: listed })}\n`);
process.on('SIGTERM', () => void hub.stop().then(() => process.exit(0)));
// Ends with the process that started it, whatever happened to that one.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
