import { X509Certificate } from 'node:crypto';
import { firstUnprintable } from './printable.js';

/** What stands for a node id in tls.peer_name. */
export const NODE_ID_PLACEHOLDER = '{node_id}';
/** tls.peer_name's default: a certificate names node <id> by a DNS name <id> (or, with no DNS name at all, its CN). */
export const DEFAULT_PEER_NAME = NODE_ID_PLACEHOLDER;

/**
 * The rule that binds a fleet certificate to a node of a gang (security
 * review 4, F5): `peerName` (tls.peer_name) with {node_id} replaced by the
 * member's node id is the name the certificate must carry:
 * - a name with `://` (e.g. spiffe://fleet.example/node/{node_id}) must be
 *   one of its URI subjectAltNames, exactly;
 * - any other (e.g. {node_id}, {node_id}.gpu.example.com) one of its DNS
 *   subjectAltNames, compared without case, or, when it has no DNS name at
 *   all, its subject CN (RFC 6125's fallback, OpenSSL's X509_check_host).
 * Wildcards name no node: `*.gpu.example.com` matches nothing. Without this,
 * any certificate of the fleet's CA answered for any member, so a node (or a
 * local user who took a node's gang port with a stolen certificate of
 * another) could tell the peers a rank was FAILED and have the gang fenced.
 */
export function certNamesNode(cert: X509Certificate, nodeId: string, peerName: string = DEFAULT_PEER_NAME): boolean {
  const name = peerName.split(NODE_ID_PLACEHOLDER).join(nodeId);
  if (name.includes('://')) return sanEntries(cert).some((e) => e.kind === 'URI' && e.value === name);
  return cert.checkHost(name, { wildcards: false, subject: 'default' }) !== undefined;
}

/** The certificate in `raw` (DER or PEM) names node `nodeId` (certNamesNode); false when it does not parse. */
export function rawCertNamesNode(raw: Buffer, nodeId: string, peerName?: string): boolean {
  try {
    return certNamesNode(new X509Certificate(raw), nodeId, peerName);
  } catch {
    return false;
  }
}

/** What a certificate names, for a refusal's line: "DNS:a, URI:spiffe://…" or "CN=a". */
export function certNames(raw: Buffer): string {
  try {
    const c = new X509Certificate(raw);
    const names = sanEntries(c).filter((e) => e.kind === 'DNS' || e.kind === 'URI');
    if (names.length > 0) return names.map((e) => `${e.kind}:${e.value}`).join(', ').slice(0, 256);
    const cn = /(?:^|\n)CN=([^\n]*)/.exec(c.subject)?.[1];
    return cn !== undefined ? `CN=${cn.slice(0, 128)}` : 'no name';
  } catch {
    return 'a certificate that does not parse';
  }
}

/** Why `peerName` cannot be tls.peer_name, or undefined. */
export function peerNameProblem(peerName: string): string | undefined {
  const count = peerName.split(NODE_ID_PLACEHOLDER).length - 1;
  if (count !== 1) return `tls.peer_name ${JSON.stringify(peerName)} must hold ${NODE_ID_PLACEHOLDER} exactly once (e.g. {node_id}, {node_id}.gpu.example.com or spiffe://fleet.example/node/{node_id})`;
  if (/[\s*]/.test(peerName) || firstUnprintable(peerName) !== undefined) return `tls.peer_name ${JSON.stringify(peerName)} must be printable, without spaces or wildcards`;
  return undefined;
}

interface SanEntry {
  kind: string;
  value: string;
}

/** Node's subjectAltName ("DNS:a, URI:b"), values with a comma or quote written as JSON strings (Node ≥ 17.3.1). */
function sanEntries(cert: X509Certificate): SanEntry[] {
  const out: SanEntry[] = [];
  const re = /([A-Za-z ]+):("(?:[^"\\]|\\.)*"|[^,]*)(?:, |$)/g;
  const s = cert.subjectAltName ?? '';
  for (let m = re.exec(s); m !== null && m[0] !== ''; m = re.exec(s)) {
    let value = m[2] ?? '';
    if (value.startsWith('"')) {
      try {
        value = JSON.parse(value) as string;
      } catch {
        continue;
      }
    }
    out.push({ kind: m[1] ?? '', value });
  }
  return out;
}
