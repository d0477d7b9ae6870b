#!/usr/bin/env node
/**
 * The floor of the start-up figures: only what an agent must do before the
 * control plane knows its node and its adopted engines, and nothing else.
 * Import the Connect client and the generated messages, read the cached
 * inventory and the shards' state files, open the stream, send Register,
 * probe each shard's /health once and report it READY. What the agent takes
 * beyond this program (configuration, logging, the supervisor, discovery,
 * the admin socket, oclif) is its overhead; bench/floor-figures.ts times both
 * in the same run and prints the ratio.
 *
 * Plain JavaScript run by node itself, as the agent's dist/ is, so no
 * compiler sits in the floor: node bench/floor.mjs <server> <node-id> <state-dir>
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { create, fromJson } from '@bufbuild/protobuf';
import { createClient } from '@connectrpc/connect';
import { createWritableIterable } from '@connectrpc/connect/protocol';
import { createConnectTransport } from '@connectrpc/connect-node';
import { AgentMessageSchema, AgentService, InventorySchema, ShardState } from '../dist/gen/llmgw/v1/agent_pb.js';

const [server, nodeId, stateDir] = process.argv.slice(2);
if (!server || !nodeId || !stateDir) {
  process.stderr.write('usage: node bench/floor.mjs <server> <node-id> <state-dir>\n');
  process.exit(2);
}

const inventory = fromJson(InventorySchema, JSON.parse(readFileSync(join(stateDir, 'inventory.json'), 'utf8')), { ignoreUnknownFields: true });
const shardsDir = join(stateDir, 'shards');
let shards = [];
try {
  shards = readdirSync(shardsDir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(join(shardsDir, f), 'utf8')).spec);
} catch {
  // No shards directory: a node with nothing to adopt.
}

const transport = createConnectTransport({ baseUrl: server, httpVersion: '2' });
const client = createClient(AgentService, transport);
const requests = createWritableIterable();
let id = 0n;
const send = (msg) => requests.write(create(AgentMessageSchema, { messageId: ++id, msg }));

const replies = client.connect(requests)[Symbol.asyncIterator]();
await send({
  case: 'register',
  value: {
    nodeId,
    hostname: 'floor',
    mgmtAddr: '127.0.0.1',
    version: 'floor',
    inventory,
    runningShards: shards.map((s) => ({ shardId: s.shardId, replicaId: s.replicaId, httpPort: s.httpPort, gpuIndices: s.gpuIndices ?? [], state: ShardState.STARTING })),
  },
});
await Promise.all(
  shards.map(async (s) => {
    const res = await fetch(`http://127.0.0.1:${s.httpPort}/health`);
    if (res.status === 200) await send({ case: 'shard', value: { nodeId, shardId: s.shardId, replicaId: s.replicaId, state: ShardState.READY } });
  }),
);
// Held open, as an agent's stream is, until the benchmark kills it: leaving
// at once could cut messages still in the socket's buffer.
while (!(await replies.next()).done);
