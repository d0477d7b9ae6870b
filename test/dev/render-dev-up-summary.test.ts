import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { DEV_SERVED_MODEL } from '../../src/dev/dev-deployment-yaml.js';
import { chatCompletionBody, curlLine } from '../../src/dev/render-dev-up-summary.js';
import { REPO_ROOT } from '../helpers/run-cli.js';

describe('curlLine', () => {
  it('quotes the request for the shell, whatever the model name holds', async () => {
    const model = `it's "odd" $HOME`;
    const line = curlLine('http://127.0.0.1:1', model);
    // What the shell would pass to curl as -d, without running curl.
    const r = await execa('sh', ['-c', line.replace(/^curl .* -d /, 'printf %s ')]);
    expect(r.stdout).toBe(chatCompletionBody(model));
    expect(JSON.parse(r.stdout).model).toBe(model);
  });
});

describe("docs/local-cluster.md's curl line", () => {
  it('is the line dev up prints for its first replica', () => {
    const readme = readFileSync(join(REPO_ROOT, 'docs/local-cluster.md'), 'utf8');
    const quoted = /`(curl -s http:\/\/127\.0\.0\.1:18000\/v1\/chat\/completions [^`]*)`/.exec(readme)?.[1];
    expect(quoted).toBe(curlLine('http://127.0.0.1:18000', DEV_SERVED_MODEL));
  });
});
