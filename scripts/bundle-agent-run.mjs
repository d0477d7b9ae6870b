#!/usr/bin/env node
/**
 * Bundles `agent run`'s path without oclif (dist/cli/fast-agent-run.js and
 * everything it imports) into one file, dist/agent-run.bundle.js, and `ctl
 * status`'s into dist/ctl-status.bundle.js, which bin/run.js loads. Resolving and loading ~300 ES modules one by one was the
 * largest part of the agent's start before Register (bench/RESULTS.md, run
 * 6: ~0.2 s on this machine, the bundle starts at 0.9x the floor). Run by
 * `npm run build` after scripts/transpile-src.mjs; dist/ must be built.
 *
 * Kept out of the bundle, and resolved from node_modules as before: koffi
 * (its prebuilt native binary), and what is loaded only on request
 * (prom-client, with metrics_addr; pino-pretty, on a terminal): in the
 * bundle V8 would still parse them at every start. execa is bundled: every
 * agent runs nvidia-smi through it right after Register, and loading its ~50
 * modules one by one then took 140–240 ms of the main thread, just when
 * adopted shards are probed and reported READY and an adopted engine's
 * death must reach the stream (bench 3b: 126 ms, 25–35 ms bundled); in the
 * bundle it costs ~10 ms of parsing at start.
 *
 * An external's static import is hoisted to the top of the bundle, so it
 * loads at every start even when the module importing it is loaded lazily:
 * prom-client did so (with @opentelemetry/api and tdigest), ~60 ms of every
 * start for an agent without metrics_addr. Such a CommonJS package is
 * required instead (REQUIRED_WHERE_USED), where its importer runs.
 *
 * A module that finds files relative to itself (`new URL('../../bin/run.js',
 * import.meta.url)`: the sim engine's command) would resolve them from the
 * bundle's directory instead and point at nothing. Each `import.meta.url`
 * in a bundled file is rewritten to that file's own URL, computed from the
 * bundle's at run time, so such paths stay right wherever the package is
 * installed.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const outdir = `${root}dist`;

/** import.meta.url of the file being bundled, as an expression evaluated in the bundle. */
const ownUrl = (file) => `new URL(${JSON.stringify(relative(outdir, file).split(sep).join('/'))}, import.meta.url).href`;

/** External CommonJS packages imported only by lazily loaded modules: required when the importer first runs. */
const REQUIRED_WHERE_USED = ['prom-client'];

/** `import { a, b as c } from 'pkg';` → `const { a, b: c } = require('pkg');` for the packages above. */
function requireWhereUsed(text) {
  let out = text;
  for (const pkg of REQUIRED_WHERE_USED) {
    // Either quote: tsc kept the source's, esbuild (scripts/transpile-src.mjs) writes double.
    out = out.replace(new RegExp(`^import \\{([^}]*)\\} from ['"]${pkg}['"];$`, 'gm'), (_, names) => `const {${names.replaceAll(' as ', ': ')}} = require('${pkg}');`);
  }
  return out;
}

const processGlobalPlugin = {
  // `import process from 'node:process'` (chalk's supports-color) makes
  // Node build the ES module namespace of every property of process,
  // which runs its lazy getters (process.report loads the diagnostic
  // report module): 8 ms of CPU at each start of `ctl status`, a tenth
  // of `node -e 0`. The default export is the global process itself.
  // A named import from it fails the build here, never silently.
  // require('process') (yaml) is left alone: it must get the object
  // itself, not a module namespace around it.
  name: 'process-global',
  setup(b) {
    b.onResolve({ filter: /^(node:)?process$/ }, (args) => (args.kind === 'import-statement' ? { path: 'process', namespace: 'process-global' } : undefined));
    b.onLoad({ filter: /.*/, namespace: 'process-global' }, () => ({ contents: 'export default globalThis.process;', loader: 'js' }));
  },
};

/**
 * One entry and what it imports, in one file at `dist/<name>.js`; `external`
 * resolved from node_modules at run time. `cjs`: whether a bundled CommonJS
 * dependency needs require(), given by a banner that loads node:module.
 * `minifyWhitespace`: without comments and indentation (names are kept, so
 * errors and logs read the same; stack traces point into one long line).
 * `processGlobal`: `import process from 'node:process'` is the global (the
 * plugin above); only where nothing imports names from it (execa, in the
 * agent's bundle, does).
 */
const bundle = async (name, entry, external, { cjs = true, minifyWhitespace = false, processGlobal = false, inject = [] } = {}) => {
  await build({
    entryPoints: { [name]: `${outdir}/${entry}` },
    outdir,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external,
    minifyWhitespace,
    inject: inject.map((file) => `${outdir}/${file}`),
    // CommonJS dependencies (pino, yaml) call require() for Node's own modules.
    banner: cjs ? { js: "import { createRequire as __llmgwCreateRequire } from 'node:module'; const require = __llmgwCreateRequire(import.meta.url);" } : {},
    logLevel: 'warning',
    plugins: [
      ...(processGlobal ? [processGlobalPlugin] : []),
      {
        name: 'own-import-meta-url',
        setup(b) {
          b.onLoad({ filter: /\/dist\/.*\.js$/ }, async (args) => {
            const text = requireWhereUsed(await readFile(args.path, 'utf8'));
            return { contents: text.includes('import.meta.url') ? text.replaceAll('import.meta.url', ownUrl(args.path)) : text, loader: 'js' };
          });
        },
      },
    ],
  });
  await keepAscii(`${outdir}/${name}.js`);
};

/**
 * V8 keeps a script's source in memory for as long as the process runs, and
 * stores it in one byte a character only when every character fits: one
 * arrow in a kept comment made the agent's 1.2 MB bundle a 2.4 MB string
 * (bench figure 5a). esbuild escapes every non-ASCII character in strings,
 * templates, regular expressions and names; what it leaves is in comments,
 * where it is replaced. One anywhere else fails the build instead.
 */
async function keepAscii(file) {
  const text = await readFile(file, 'utf8');
  if (!/[^\x00-\x7f]/.test(text)) return;
  const lines = text.split('\n').map((line, i) => {
    if (!/[^\x00-\x7f]/.test(line)) return line;
    if (!/^\s*(\/\/|\/\*|\*)/.test(line)) throw new Error(`${file}:${i + 1}: a non-ASCII character outside a comment: ${line.trim().slice(0, 120)}`);
    return line.replaceAll('\u2192', '->').replaceAll('\u2014', '--').replace(/[^\x00-\x7f]/g, '?');
  });
  await writeFile(file, lines.join('\n'));
}

// Without whitespace: V8 keeps the agent's source for as long as it runs, and
// an index of its line ends once a stack trace is formatted; 1.2 MB and 32,000
// lines were 1.4 MB of the agent's heap (bench figure 5a, heap snapshot).
// `inject`: every use of the global Headers in the bundle (connect-es makes
// one for each call) gets src/lib/web-headers.ts instead. The global's first
// use loads all of undici, which nothing else in the steady agent needs: 8
// shards, 1 s heartbeats: 69.8 -> 64.3 MB RSS, of which 3.8 MB the node
// binary's pages (bench figure 5a; 16 at 8/32/64 shards 69.7/79.6/78.5 ->
// 64.6/76.1/73.9 MB; RESULTS.md, 2026-12-07, rss9). fetch() still loads
// undici where a pull or an adapter call makes one.
await bundle('agent-run.bundle', 'cli/fast-agent-run.js', ['koffi', 'prom-client', 'pino-pretty'], { minifyWhitespace: true, inject: ['lib/web-headers.js'] });
// `ctl status`'s path without oclif too: its 20 modules cost about 10 ms of
// a cold start that is 1.5x `node -e 0` (bench figure 1b). yaml is needed
// only with a --config: left out of what every start parses. (Not chalk: an
// external's static import is hoisted to the top of the bundle, so it would
// load for --json too, which never colours anything.)
// Nothing in it is CommonJS: node:module, which the banner would load, costs
// a cold start a few ms of CPU for nothing.
await bundle('ctl-status.bundle', 'cli/fast-ctl-status.js', ['yaml'], { cjs: false, processGlobal: true });
