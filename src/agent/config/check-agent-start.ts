import { accessSync, constants } from 'node:fs';
import { dirname } from 'node:path';
import { errnoCode } from '../../lib/errno.js';
import { LlmgwError } from '../../lib/errors.js';
import { assertTrustedDirectory } from '../../lib/files/check-directory-trust.js';
import { assertTrustedStore } from '../../models/store-trust.js';
import { ETC_GROUP, findGroup } from '../../lib/find-group.js';
import { type AgentConfig, tlsEnabled } from './agent-config.js';

/**
 * What `agent run` refuses at start (exit 78) beyond loading the
 * configuration, checked without starting anything, for `--print-config`:
 * the directories it trusts (run-agent.ts's assertTrustedDirectory) and the
 * admin group (the admin server's, with its message). Loading already
 * refuses bad values, unknown keys, engine users that do not exist and TLS
 * files that cannot be read. `--print-config` passed configurations
 * the agent then refused, and it is the only pre-flight check a config gets
 * (new-operator walkthrough 2, row 18).
 *
 * Each problem is the message the start would print. Keep this list next
 * to what run-agent.ts and admin-server.ts
 * check: a start check added there and not here makes `--print-config`
 * pass a config the agent refuses again.
 */
export function checkAgentStart(c: AgentConfig, etcGroupPath: string = ETC_GROUP): string[] {
  const problems: string[] = [];
  const attempt = (check: () => void) => {
    try {
      check();
    } catch (err) {
      if (!(err instanceof LlmgwError) || err.kind !== 'config') throw err;
      problems.push(err.message);
    }
  };
  attempt(() => assertTrustedDirectory(c.supervisor.stateDir, 'supervisor.state_dir'));
  attempt(() => assertTrustedDirectory(c.supervisor.logDir, 'supervisor.log_dir'));
  attempt(() => assertTrustedDirectory(dirname(c.admin.socket), 'admin.socket'));
  if (c.models.cacheDir !== '') attempt(() => assertTrustedStore(c.models.cacheDir));
  const group = c.admin.group;
  if (group !== '' && !findGroup({ name: group }, etcGroupPath)) {
    // admin-server.ts's resolveGroup says the same when the agent starts listening.
    problems.push(`admin.group: no group named ${JSON.stringify(group)} in ${etcGroupPath}; create it (groupadd ${group}) or set admin.group to an existing group`);
  }
  const readGroup = c.admin.readGroup ?? '';
  if (readGroup !== '' && !findGroup({ name: readGroup }, etcGroupPath)) {
    problems.push(`admin.read_group: no group named ${JSON.stringify(readGroup)} in ${etcGroupPath}; create it (groupadd ${readGroup}) or set admin.read_group to an existing group`);
  }
  return problems;
}

/**
 * What a start would not refuse but wait for, for `--print-config`: TLS
 * files not written yet (loading passes them, and the connection waits for
 * them; check-config-cross-keys.ts). Each one line.
 */
export function startNotes(c: AgentConfig): string[] {
  if (!tlsEnabled(c.tls)) return [];
  const notes: string[] = [];
  for (const key of ['tls.cert', 'tls.key', 'tls.ca'] as const) {
    const file = c.tls[key.slice(4) as 'cert' | 'key' | 'ca'];
    if (file === '') continue;
    try {
      accessSync(file, constants.F_OK);
    } catch (err) {
      if (errnoCode(err) === 'ENOENT') notes.push(`${key} ${file} is not yet written; the agent will wait for it and connect once it is there`);
    }
  }
  return notes;
}
