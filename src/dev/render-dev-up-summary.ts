import chalk from 'chalk';
import type { DevUpSummary } from './dev-up-summary.js';

/** A word for the shell in single quotes: nothing inside is expanded, a ' is closed, escaped and reopened. */
function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The request the printed curl line sends; the sim answers any content. */
export function chatCompletionBody(model: string): string {
  return JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello! What do you run on?' }], max_tokens: 16 });
}

export function curlLine(url: string, model: string): string {
  return `curl -s ${url}/v1/chat/completions -H 'Content-Type: application/json' -d ${shellQuote(chatCompletionBody(model))}`;
}

/** What a newcomer reads once everything is up: where to send requests, what to try, where the logs are. */
export function renderDevUpSummary(s: DevUpSummary): string {
  const h = (t: string) => chalk.bold(t);
  const sock = `--socket ${shellQuote(s.socket)}`;
  const first = s.replicas[0];
  const firstShard = first?.shards[0]?.shardId ?? '<shard>';
  const width = Math.max(...s.replicas.map((r) => r.id.length));
  const lines = [
    '',
    h(`${s.replicas.length} replica(s) ready`) + ` on ${s.gpus.count} × ${s.gpus.name || 'GPU'} (${s.gpus.source === 'fake' ? `fake GPUs: bin/fake-nvidia-smi, LLMGW_FAKE_GPUS=${s.gpus.dataset ?? 'hgx-h100x8'}` : `real GPUs, ${s.gpus.nvidiaSmi}`})`,
    ...s.replicas.map((r) => `  ${r.id.padEnd(width)}  ${chalk.cyan(r.url)}  model ${r.model}, shard ${r.shards.map((x) => `${x.shardId} on GPU ${x.gpus.join(',')}`).join('; ')}`),
    '',
    h('Send a chat completion:'),
    ...(first ? [`  ${curlLine(first.url, first.model)}`] : []),
    '',
    h('Ask the agent (llmgw ctl):'),
    `  ${s.cli} ctl status ${sock}`,
    `  ${s.cli} ctl logs ${firstShard} -n 20 ${sock}`,
    `  ${s.cli} ctl drain ${firstShard} --wait ${sock}     # traffic leaves it (the control plane keeps it drained)`,
    `  ${s.cli} ctl drain ${firstShard} --cancel ${sock}   # READY again: the lines below need it serving`,
    `  ${s.cli} ctl adopt ${sock}`,
    ...(s.warm
      ? [
          '',
          h('Warm starts and sleep (the vLLM double):'),
          `  ${s.cli} models list --config ${shellQuote(s.agent.config)}   # ${s.warm.model}, pulled and read into memory before the start`,
          `  ${s.cli} ctl status ${sock}                  # the model's warmth and time to READY`,
          `  ${s.cli} ctl sleep ${firstShard} --level 1 ${sock}   # frees its GPU memory; SLEEPING`,
          `  ${s.cli} ctl wake ${firstShard} ${sock}             # READY again once it gives its known answer`,
        ]
      : []),
    '',
    h('Logs:'),
    `  agent          ${s.logs.agent}`,
    `  control plane  ${s.logs.controlPlane}`,
    `  engines        ${s.logs.engines}/`,
    '',
    `Control plane ${s.controlPlane}: the reference control plane, for local runs and tests;`,
    'production runs the llmgw control plane.',
    `Agent ${s.agent.nodeId} (pid ${s.agent.pid}), deployment ${s.deployment}, temp dir ${s.tempDir}.`,
    '',
    h('Press Ctrl-C to stop everything') + ' (engines, agent, control plane; the temp dir is removed unless --keep).',
    'Changes from now on (a replica on a new port, failures) are printed below.',
  ];
  return lines.join('\n');
}
