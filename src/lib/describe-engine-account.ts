/** What an engine account is described from: the agent's EngineAccount, or its proto JSON in `ctl status`. */
export interface EngineAccountView {
  engine?: string;
  user?: string;
  uid?: number;
  configured?: boolean;
  allowRoot?: boolean;
  refused?: boolean;
}

/**
 * One line saying who an engine runs as: `vllm → llmgw-engine (uid 998)`,
 * `vllm → root (allow_root)`, or, for a root agent with neither a user nor
 * allow_root, `vllm → root: refused; set engines.vllm.user …`.
 */
export function describeEngineAccount(a: EngineAccountView): string {
  const engine = a.engine || '?';
  if (a.configured) return `${engine} → ${a.user || '?'} (uid ${a.uid ?? '?'})`;
  if (a.allowRoot) return `${engine} → root (allow_root)`;
  if (a.refused) return `${engine} → root: refused; set engines.${engine}.user to an unprivileged account (or engines.${engine}.allow_root: true)`;
  return `${engine} → ${a.user || '?'} (uid ${a.uid ?? '?'}), the agent's own account`;
}
