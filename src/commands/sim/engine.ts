import { Flags } from '@oclif/core';
import { BaseCommand } from '../../cli/base-command.js';
import { durationFlag as duration } from '../../cli/duration-flags.js';
import { formatDuration } from '../../lib/duration.js';
import { SIM_DEFAULTS } from '../../sim/sim-engine-options.js';

export default class SimEngine extends BaseCommand {
  static override summary = "Run a simulated inference engine that behaves like vLLM's OpenAI server.";

  static override description = `Serves GET /health, GET /v1/models, POST /v1/chat/completions and
/v1/completions (stream: true gives SSE) and GET /metrics with vLLM's gauge
names. The port stays closed while "loading", as vLLM's does. SIGTERM stops
accepting, finishes in-flight requests and exits 0. Fault switches
(--fail-after, --never-ready, --ignore-sigterm, --hang-after, --stall-after,
--spawn-child, --fragile-worker, --spawn-escaping-child) reproduce the failures the agent must
handle. /metrics has vllm:generation_tokens_total, which --stall-after freezes.`;

  static override examples = [
    '<%= config.bin %> sim engine --port 8000 --model llama-3-8b',
    '<%= config.bin %> sim engine --port 8000 --load-time 5s --token-latency 50ms',
    '# crashes while loading, like a CUDA error would',
    '<%= config.bin %> sim engine --port 8000 --load-time 30s --fail-after 2s --exit-code 3',
    '# stops answering (health included) after 10s; the process stays',
    '<%= config.bin %> sim engine --port 8000 --hang-after 10s',
    '# answers /health and takes requests but generates nothing after 30s',
    '<%= config.bin %> sim engine --port 8000 --stall-after 30s',
    '# a grandchild that leaves the process group, which only a cgroup stop ends',
    '<%= config.bin %> sim engine --port 8000 --spawn-escaping-child',
    '# a worker whose SIGTERM aborts the in-flight requests: only a stop that asks the engine alone drains',
    '<%= config.bin %> sim engine --port 8000 --spawn-child --fragile-worker',
    '# a worker rank: no HTTP, just stays alive',
    '<%= config.bin %> sim engine --worker --log-rate 5',
  ];

  // An engine, not a reporting command: there is no result to print as JSON.
  static override enableJsonFlag = false;

  // Run by the agent as an engine: an operator's `llmgw config` must not change it.
  static override honoursPreferences = false;

  static override flags = {
    // Given twice, the last wins, as vLLM's argparse takes it: the agent passes --host 0.0.0.0 and an
    // operator's engines.sim.extra_args (dev up's: 127.0.0.1) comes after it.
    host: Flags.string({ summary: 'Address to listen on (the last one given wins).', default: [SIM_DEFAULTS.host], multiple: true, multipleNonGreedy: true }),
    port: Flags.integer({ summary: 'Port to listen on (0 picks a free one).', default: SIM_DEFAULTS.port, min: 0, max: 65535 }),
    model: Flags.string({ summary: 'Served model name, as /v1/models lists it.', default: SIM_DEFAULTS.model }),
    'load-time': duration({ summary: 'Time spent "loading" with the port closed, e.g. 5s.', default: SIM_DEFAULTS.loadTimeMs, defaultHelp: async () => formatDuration(SIM_DEFAULTS.loadTimeMs) }),
    'load-until-file': Flags.string({ summary: 'Keep loading (the port closed) until this file exists, then --load-time more.' }),
    'token-latency': duration({ summary: 'Time per generated token, e.g. 20ms.', default: SIM_DEFAULTS.tokenLatencyMs, defaultHelp: async () => formatDuration(SIM_DEFAULTS.tokenLatencyMs) }),
    'max-tokens': Flags.integer({ summary: 'Tokens generated when a request does not say.', default: SIM_DEFAULTS.maxTokens, min: 0 }),
    'fail-after': duration({ summary: 'Crash this long after start (with --exit-code), printing an error first.' }),
    'exit-code': Flags.integer({ summary: 'Exit status for --fail-after.', default: SIM_DEFAULTS.exitCode, min: 0, max: 255 }),
    'never-ready': Flags.boolean({ summary: 'Never open the port: load forever.', default: false }),
    'ignore-sigterm': Flags.boolean({ summary: 'Log SIGTERM and keep running (also in the --spawn-child grandchild).', default: false }),
    'hang-after': duration({ summary: 'From this long after start, answer nothing (health included); the process stays.' }),
    'log-rate': Flags.integer({ summary: 'Write this many log lines per second to stdout.', min: 1 }),
    'stall-after': duration({
      summary: 'From this long after start, generate no token: /health stays 200, requests are accepted and stay running, the token counter stays flat.',
    }),
    'spawn-escaping-child': Flags.boolean({
      summary: 'Start a grandchild that setsid()s out of the process group and keeps running (ends on its own after 30m).',
      default: false,
    }),
    'spawn-child': Flags.boolean({ summary: 'Start a grandchild in the same process group that sleeps until killed.', default: false }),
    'fragile-worker': Flags.boolean({
      summary: "With --spawn-child: the grandchild dies on SIGTERM and its death aborts every in-flight request and exits 1, as vLLM's workers (TP > 1) make the engine do.",
      default: false,
      dependsOn: ['spawn-child'],
    }),
    worker: Flags.boolean({ summary: 'A non-zero rank: serve no HTTP, stay alive and log.', default: false }),
    rendezvous: Flags.string({ summary: "host:port of a multi-node gang's rendezvous: rank 0 listens there, --worker ranks connect; a peer lost stalls rank 0 and never ends a rank, as NCCL's collectives block." }),
  };

  async run(): Promise<void> {
    const { flags } = await this.parse(SimEngine);
    // Imported here so that `--help` and flag errors do not pay for the server.
    const { runSimEngine } = await import('../../sim/sim-engine.js');
    const code = await runSimEngine({
      host: flags.host.at(-1) ?? SIM_DEFAULTS.host,
      port: flags.port,
      model: flags.model,
      loadTimeMs: flags['load-time'],
      loadUntilFile: flags['load-until-file'],
      tokenLatencyMs: flags['token-latency'],
      maxTokens: flags['max-tokens'],
      failAfterMs: flags['fail-after'],
      exitCode: flags['exit-code'],
      neverReady: flags['never-ready'],
      ignoreSigterm: flags['ignore-sigterm'],
      hangAfterMs: flags['hang-after'],
      logRate: flags['log-rate'],
      stallAfterMs: flags['stall-after'],
      spawnChild: flags['spawn-child'],
      fragileWorker: flags['fragile-worker'],
      spawnEscapingChild: flags['spawn-escaping-child'],
      worker: flags.worker,
      rendezvous: flags.rendezvous,
    });
    // Exits now rather than when the last handle closes: a crash simulated
    // with --fail-after must exit even with requests still open.
    this.exit(code);
  }
}
