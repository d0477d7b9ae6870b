import { usageError } from '../lib/errors.js';

/**
 * huggingface_hub's allow_patterns (filter_repo_objects): fnmatch patterns
 * against the whole repo path, where `*` also crosses `/`, `?` is one
 * character, `[...]` a class; a pattern ending in `/` means everything under
 * that folder.
 */
export function includeMatcher(patterns: readonly string[]): (path: string) => boolean {
  if (patterns.length === 0) return () => true;
  const res = patterns.map(patternRegExp);
  return (path) => res.some((re) => re.test(path));
}

function patternRegExp(pattern: string): RegExp {
  if (pattern === '' || pattern.includes('\0')) throw usageError(`--include ${JSON.stringify(pattern)} is not a file pattern; write it like '*.safetensors'`);
  const p = pattern.endsWith('/') ? `${pattern}*` : pattern;
  let out = '';
  for (let i = 0; i < p.length; i++) {
    const c = p[i] as string;
    if (c === '*') out += '.*';
    else if (c === '?') out += '.';
    else if (c === '[') {
      const end = p.indexOf(']', i + 2);
      if (end < 0) {
        out += '\\[';
        continue;
      }
      let body = p.slice(i + 1, end);
      if (body.startsWith('!')) body = `^${body.slice(1)}`;
      out += `[${body.replace(/\\/g, '\\\\')}]`;
      i = end;
    } else out += c.replace(/[.+^${}()|\\/]/g, '\\$&');
  }
  return new RegExp(`^${out}$`, 's');
}
