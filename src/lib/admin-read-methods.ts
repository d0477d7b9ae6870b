/**
 * The AdminService methods that change nothing. Every other method, and any
 * added later, is a write: refused to admin.read_group members by default
 * (the agent's write gate), refused once the agent is stopping (its stopping
 * gate), and never sent twice by ctl on its own (call-unary-json.ts).
 * Adapters only reads a shard's LoRA adapters; ChangeAdapters is the write.
 * In src/lib so that ctl and the agent read the one list.
 */
export const READ_METHODS: ReadonlySet<string> = new Set(['Status', 'Logs', 'Events', 'Adapters']);
