import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { chatCompletionBody, curlLine } from '../../src/dev/render-dev-up-summary.js';

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
