// The .deb's /usr/share/doc/llmgw/copyright, machine-readable (DEP-5,
// https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/): llmgw's own files, the
// bundled Node runtime (its own LICENSE, with the notices of what Node bundles, ships beside it as
// node-LICENSE, as Node's own packages do), and one paragraph per production dependency with the
// copyright lines of its licence file and its package.json licence. A dependency under a licence
// this file has no text for fails the build: the copyright file would otherwise be wrong.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const EXPAT = `Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
THE SOFTWARE.`;

const ISC = `Permission to use, copy, modify, and/or distribute this software for any
purpose with or without fee is hereby granted, provided that the above
copyright notice and this permission notice appear in all copies.

THE SOFTWARE IS PROVIDED "AS IS" AND THE AUTHOR DISCLAIMS ALL WARRANTIES
WITH REGARD TO THIS SOFTWARE INCLUDING ALL IMPLIED WARRANTIES OF
MERCHANTABILITY AND FITNESS. IN NO EVENT SHALL THE AUTHOR BE LIABLE FOR
ANY SPECIAL, DIRECT, INDIRECT, OR CONSEQUENTIAL DAMAGES OR ANY DAMAGES
WHATSOEVER RESULTING FROM LOSS OF USE, DATA OR PROFITS, WHETHER IN AN
ACTION OF CONTRACT, NEGLIGENCE OR OTHER TORTIOUS ACTION, ARISING OUT OF
OR IN CONNECTION WITH THE USE OR PERFORMANCE OF THIS SOFTWARE.`;

const BSD_HEAD = `Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice,
   this list of conditions and the following disclaimer.

2. Redistributions in binary form must reproduce the above copyright notice,
   this list of conditions and the following disclaimer in the documentation
   and/or other materials provided with the distribution.`;

const BSD_THIRD = `

3. Neither the name of the copyright holder nor the names of its
   contributors may be used to endorse or promote products derived from
   this software without specific prior written permission.`;

const BSD_TAIL = `

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR CONTRIBUTORS BE
LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS
INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN
CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE)
ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
POSSIBILITY OF SUCH DAMAGE.`;

/** SPDX identifiers (package.json) to DEP-5 short names, with each licence's text or where Debian keeps it. */
const LICENSES = {
  MIT: { name: 'Expat', text: () => EXPAT },
  ISC: { name: 'ISC', text: () => ISC },
  'BSD-2-Clause': { name: 'BSD-2-clause', text: () => BSD_HEAD + BSD_TAIL },
  'BSD-3-Clause': { name: 'BSD-3-clause', text: () => BSD_HEAD + BSD_THIRD + BSD_TAIL },
  'Apache-2.0': { name: 'Apache-2.0', text: () => 'On Debian systems, the complete text of the Apache License, Version 2.0\ncan be found in "/usr/share/common-licenses/Apache-2.0".' },
  'CC0-1.0': { name: 'CC0-1.0', text: () => 'On Debian systems, the complete text of the CC0 1.0 Universal licence\ncan be found in "/usr/share/common-licenses/CC0-1.0".' },
  // No common-licenses copy: the text as the first dependency under it ships it.
  'BlueOak-1.0.0': { name: 'BlueOak-1.0.0', text: (dir) => readLicenseFile(dir) },
};

/** `Files`, `Copyright`, `License` of each production dependency, and the licence texts they need. */
export function renderCopyright({ version, nodeVersion, nodeLicenseAt, dependencyDirs, root }) {
  const prefix = '/usr/lib/llmgw';
  const used = new Map();
  const deps = [];
  for (const dir of [...dependencyDirs].sort()) {
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    const expr = licenseOf(pkg);
    if (!expr) throw new Error(`${pkg.name} ${pkg.version} names no licence in its package.json: the copyright file cannot say under what it is shipped`);
    const names = expr.replace(/[()]/g, '').split(/\s+(?:AND|OR)\s+/);
    for (const id of names) {
      if (!LICENSES[id]) throw new Error(`${pkg.name} ${pkg.version} is under ${id}, which scripts/deb-copyright.mjs has no text for: add it there`);
      if (!used.has(id)) used.set(id, dir);
    }
    const debExpr = expr.replace(/[()]/g, '').replace(/\s+AND\s+/g, ' and ').replace(/\s+OR\s+/g, ' or ').replace(/[A-Za-z0-9.-]+/g, (t) => LICENSES[t]?.name ?? t);
    deps.push({ path: relative(root, dir), copyright: copyrightOf(dir, pkg), license: debExpr, name: `${pkg.name} ${pkg.version}`, own: licenseFileOf(dir) !== undefined });
  }
  if (!used.has('Apache-2.0')) used.set('Apache-2.0', '');
  if (!used.has('MIT')) used.set('MIT', '');
  const paragraphs = [
    ['Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/', 'Upstream-Name: llmgw', 'Source: https://github.com/llmgw/llmgw-node', `Comment: llmgw ${version}, its production dependencies as npm installed them, and the Node.js ${nodeVersion} runtime it runs on, built by npm run package.`],
    ['Files: *', 'Copyright: the llmgw authors', 'License: Apache-2.0'],
    [
      `Files: ${prefix.slice(1)}/node/*`,
      'Copyright: Node.js contributors; Joyent, Inc. and other Node contributors',
      'License: Expat',
      `Comment: Node.js ${nodeVersion}. Node.js bundles third-party components (V8, libuv, OpenSSL, ICU, llhttp, and others), each under its own licence; Node's LICENSE, which lists every one with its notice, is /usr/share/doc/llmgw/node-LICENSE${nodeLicenseAt ? '' : ' (missing: this Node install had no LICENSE)'}.`,
    ],
    ...deps.map((d) => [`Files: ${d.path}/*`, `Copyright: ${d.copyright}`, `License: ${d.license}`, `Comment: ${d.name}; ${d.own ? 'its own licence file is in its folder' : 'it ships no licence file of its own (package.json names the licence)'}.`]),
    ...[...used].sort(([a], [b]) => LICENSES[a].name.localeCompare(LICENSES[b].name)).map(([id, dir]) => [`License: ${LICENSES[id].name}`, ...indent(LICENSES[id].text(dir))]),
  ];
  return `${paragraphs.map((p) => p.join('\n')).join('\n\n')}\n`;
}

function licenseOf(pkg) {
  if (typeof pkg.license === 'string') return pkg.license;
  if (pkg.license?.type) return pkg.license.type;
  if (Array.isArray(pkg.licenses)) return pkg.licenses.map((l) => l.type ?? l).join(' OR ');
  return undefined;
}

function licenseFileOf(dir) {
  const name = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.(md|txt))?$/i.test(f));
  return name ? join(dir, name) : undefined;
}

function readLicenseFile(dir) {
  const file = dir && licenseFileOf(dir);
  if (!file) throw new Error(`no licence file in ${dir} to take its licence's text from`);
  return readFileSync(file, 'utf8').trim();
}

/** The copyright lines of a dependency's licence file; its package.json author else. */
function copyrightOf(dir, pkg) {
  const file = licenseFileOf(dir);
  const lines = file && existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => /^copyright\s+(\(c\)|©|\d{4}|[A-Z])/i.test(l) && !/notice|\[yyyy\]|\{yyyy\}|owner\]/i.test(l))
        .map((l) => l.replace(/^copyright\s+(\(c\)\s*|©\s*)?/i, '').trim())
    : [];
  if (lines.length > 0) return [...new Set(lines)].join('\n ');
  const author = typeof pkg.author === 'string' ? pkg.author : pkg.author?.name;
  return author || `the ${pkg.name} authors`;
}

/** A DEP-5 continuation: every line indented by one space, an empty one written " .". */
function indent(text) {
  return text.split('\n').map((l) => (l.trim() === '' ? ' .' : ` ${l.trimEnd()}`));
}
