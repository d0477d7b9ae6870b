/**
 * The full unit name of shard `shardId`'s engine, `.service` included: given
 * without its suffix, an id that itself ends in `.service` ("x.service") was
 * taken by systemd-run as the whole name, while the agent asked systemctl
 * about "llmgw-shard-x.service.service" and leaked the unit (finding 15 of
 * the security review); an id ending in ".socket" would name a socket unit.
 * Characters a unit name cannot hold are escaped as systemd-escape does
 * (\xNN); shard ids today hold none (SHARD_ID_PATTERN is [A-Za-z0-9._-]),
 * so today's names are unchanged and stay what adoption looks for.
 */
export function systemdUnitName(shardId: string): string {
  const escaped = [...shardId].map((ch) => (/^[A-Za-z0-9:_.-]$/.test(ch) ? ch : escapeChar(ch))).join('');
  return `llmgw-shard-${escaped}.service`;
}

function escapeChar(ch: string): string {
  return [...Buffer.from(ch, 'utf8')].map((b) => `\\x${b.toString(16).padStart(2, '0')}`).join('');
}
