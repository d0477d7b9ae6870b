import { create } from '@bufbuild/protobuf';
import { type AdapterSpec, AdapterSpecSchema, AdapterState, type AdapterStatus, type AgentMessage, type ShardStatus } from '../../src/gen/llmgw/v1/agent_pb.js';
import { fakeAdapterRepo } from '../helpers/fake-adapter-repo.js';
import { FakeHub, bytes, fakeRepo } from '../models/fake-hub.js';

/*
 * What the adapter end-to-end tests share: a hub with a base model and
 * adapters of it, the predicates on ShardStatus.adapters, and asking the
 * double by an adapter's name.
 */

export const BASE = 'acme/llama';

/** A hub holding BASE and `n` adapters of it (acme/lora-<i>, rank 8, each its own bytes), one of another base and one of rank 64. */
export function loraHub(n = 8): FakeHub {
  const hub = new FakeHub();
  const json = (s: string) => ({ content: Buffer.from(s), lfs: false });
  hub.repos.set(BASE, fakeRepo(BASE, [
    { path: 'config.json', ...json('{"architectures":["LlamaForCausalLM"]}') },
    { path: 'model.safetensors', content: bytes(60_000, 9), lfs: true },
    { path: 'tokenizer.json', ...json('{"t":1}') },
    { path: 'tokenizer_config.json', ...json('{}') },
  ]));
  for (let i = 0; i < n; i++) hub.repos.set(`acme/lora-${i}`, fakeAdapterRepo(`acme/lora-${i}`, { base: BASE, rank: 8, seed: 100 + i, weights: bytes(4_000, 100 + i) }));
  hub.repos.set('acme/lora-other-base', fakeAdapterRepo('acme/lora-other-base', { base: 'acme/other', rank: 8, weights: bytes(4_000, 7) }));
  hub.repos.set('acme/lora-r64', fakeAdapterRepo('acme/lora-r64', { base: BASE, rank: 64, weights: bytes(4_000, 8) }));
  return hub;
}

export const lora = (name: string, repo: string, pinned = false): AdapterSpec => create(AdapterSpecSchema, { name, repo, revision: 'main', pinned });

/** A status of `shardId` whose adapters are exactly `want` (LOADED ones proven). */
export const adaptersAre =
  (shardId: string, want: Record<string, AdapterState>) =>
  (m: AgentMessage): boolean => {
    if (m.msg.case !== 'shard' || m.msg.value.shardId !== shardId) return false;
    const got = m.msg.value.adapters;
    const names = Object.keys(want);
    return got.length === names.length && got.every((a) => want[a.name] === a.state && (a.state !== AdapterState.LOADED || a.proven));
  };

export const adapterOf = (s: ShardStatus, name: string): AdapterStatus | undefined => s.adapters.find((a) => a.name === name);

/** The double's answer to a completion naming `model` (an adapter's request model); n > 1 asks for n choices. */
export async function ask(port: number, model: string, n = 1, maxTokens = 4): Promise<{ status: number; texts: string[] }> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Say which tenant you are.', max_tokens: maxTokens, temperature: 0, n }),
  });
  const body = (await res.json().catch(() => ({}))) as { choices?: { text: string }[] };
  return { status: res.status, texts: (body.choices ?? []).map((c) => c.text) };
}

/** The adapter names the double lists (its /v1/models entries with a parent). */
export async function listed(port: number): Promise<string[]> {
  const res = await fetch(`http://127.0.0.1:${port}/v1/models`);
  const body = (await res.json()) as { data: { id: string; parent?: string | null }[] };
  return body.data.filter((d) => d.parent).map((d) => d.id).sort();
}
