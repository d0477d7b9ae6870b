import { accessSync, constants, readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { describeErrno, errnoCode } from '../../lib/errno.js';
import { keyPairProblem } from '../../lib/check-key-pair.js';
import { configError } from '../../lib/errors.js';
import { MAX_TIMER_MS, formatDuration } from '../../lib/duration.js';
import { checkUnitProperties } from '../../lib/systemd/allowed-unit-properties.js';
import { SPEC_BY_KEY, type KeySpec } from './config-keys.js';
import { tlsEnabled, type AgentConfig } from './agent-config.js';
import { camelPath } from './camel-path.js';
import { checkModelsConfig } from './check-models-config.js';
import { parseEndpoint } from '../../lib/gang-problems.js';
import { gangCertProblem } from '../../lib/gang-cert-purpose.js';
import { certNames, DEFAULT_PEER_NAME, peerNameProblem, rawCertNamesNode } from '../../lib/cert-names-node.js';

/** The shortest stop_grace that still gives a drain of at least 1 s (engines/shutdown-timeout.ts: shutdownTimeoutS(2000) is 1). */
export const MIN_STOP_GRACE_MS = 2000;

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and localhost: traffic that never leaves this node. */
function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h) || /^(0+:){7}0*1$/.test(h);
  return false;
}

/**
 * gang_addr: host:port (port 0 takes a free one). With TLS configured it is
 * served by mutual TLS with the agent's certificate, key and CA, so all three
 * must be set; never a plaintext endpoint beside a TLS control plane, nor
 * off loopback without insecure_plaintext. The
 * certificate, when already there, must be good for a TLS server and client
 * both (gangCertProblem), found at start, not by a fenced gang.
 */
function checkGangAddr(c: AgentConfig, where: (key: string) => string): void {
  const peerName = c.tls.peerName ?? DEFAULT_PEER_NAME;
  const nameProblem = peerNameProblem(peerName);
  if (nameProblem) throw configError(`${nameProblem} (${where('tls.peer_name')})`);
  if (c.gangAddr === '') return;
  if (parseEndpoint(c.gangAddr.replace(/:0$/, ':1')) === undefined) {
    throw configError(`gang_addr ${JSON.stringify(c.gangAddr)} is not host:port (an address of this node the other ranks reach, e.g. 10.0.0.5:7471) (${where('gang_addr')})`);
  }
  if (!tlsEnabled(c.tls)) {
    // In plaintext anyone who reaches it reads this node's ranks, and whoever holds its port answers for them (security review 4, F5).
    const host = c.gangAddr.slice(0, c.gangAddr.lastIndexOf(':'));
    if (!isLoopbackHost(host) && !c.insecurePlaintext) {
      throw configError(
        `gang_addr ${c.gangAddr} is plaintext (no tls keys) on an address that is not loopback; set tls.cert, tls.key and tls.ca for mutual TLS, use a loopback address (agents on one machine), or set insecure_plaintext: true if this network is isolated (${where('gang_addr')})`,
      );
    }
    return;
  }
  const missing = (['cert', 'key', 'ca'] as const).find((k) => c.tls[k] === '');
  if (missing) {
    throw configError(`gang_addr is set and tls.${missing} is not: the gang endpoint serves and asks its peers by mutual TLS with the agent's certificate, key and CA; set tls.${missing}, or unset gang_addr (${where('gang_addr')})`);
  }
  let pem: Buffer;
  try {
    pem = readFileSync(c.tls.cert);
  } catch {
    // Not written yet (or unreadable, refused above): the endpoint checks it when it reads it.
    return;
  }
  const problem = gangCertProblem(pem, c.tls.cert);
  if (problem) throw configError(`${problem} (${where('gang_addr')})`);
  // Peers refuse a certificate that does not name this node (certNamesNode): found here, not by a gang whose asks all fail.
  if (!rawCertNamesNode(pem, c.nodeId, peerName)) {
    throw configError(
      `tls.cert ${c.tls.cert} names ${certNames(pem)}, not node ${c.nodeId} by tls.peer_name ${JSON.stringify(peerName)}: the gang's peers refuse an endpoint whose certificate names another node; issue this node's certificate with that name, or set tls.peer_name to the fleet's pattern (${where('tls.peer_name')})`,
    );
  }
}

/** Duration keys the agent waits with a timer (the retentions and tls.expiry_warning are ages, which may be longer). */
const TIMER_KEYS = [
  'heartbeat_interval',
  'reconnect_base',
  'reconnect_max',
  'register_timeout',
  'stream_stall_timeout',
  'adopt_ready_timeout',
  'discovery.interval',
  'discovery.timeout',
  'supervisor.stop_grace',
  'supervisor.worker_settle',
  'supervisor.health_interval',
  'supervisor.stall_timeout',
  'supervisor.known_answer_interval',
  'supervisor.known_answer_timeout',
  'supervisor.wake_timeout',
  'supervisor.disk_pressure.interval',
  'gang_agent_grace',
] as const;

/** The parsed value of `key` in the config. */
function keyValue(c: AgentConfig, key: string): unknown {
  let v: unknown = c;
  for (const p of camelPath(SPEC_BY_KEY.get(key) as KeySpec)) v = (v as Record<string, unknown>)[p];
  return v;
}

/**
 * Rules that span keys. The TLS ones follow the Go agent: a scheme that says
 * plaintext while certificates are configured would leave a cluster believing
 * it has mutual authentication when it has none, so it is refused both ways.
 */
export function checkConfigCrossKeys(c: AgentConfig, where: (key: string) => string): void {
  // Empty only for a command that never reaches the control plane (models …: LoadConfigOptions.unneeded).
  if (c.server !== '') checkServer(c, tlsEnabled(c.tls), where);
  if (c.reconnectMaxMs < c.reconnectBaseMs) {
    throw configError(`reconnect_max must not be less than reconnect_base (${where('reconnect_max')})`);
  }
  for (const key of ['heartbeat_interval', 'reconnect_base', 'adopt_ready_timeout', 'discovery.interval', 'discovery.timeout', 'supervisor.health_interval', 'supervisor.known_answer_timeout', 'gang_agent_grace'] as const) {
    if (keyValue(c, key) === 0) throw configError(`${key} must be greater than 0 (${where(key)})`);
  }
  for (const key of TIMER_KEYS) {
    const v = keyValue(c, key);
    // setTimeout takes a longer delay as 1 ms: heartbeat_interval: 1000h would send a heartbeat every millisecond.
    if (typeof v === 'number' && v > MAX_TIMER_MS) throw configError(`${key} ${formatDuration(v)} is longer than a timer can wait; set it to at most 596h (${where(key)})`);
  }
  // Below it vLLM's --shutdown-timeout would be 0, its default, which aborts
  // in-flight requests instead of draining them.
  if (c.supervisor.stopGraceMs < MIN_STOP_GRACE_MS) {
    throw configError(
      `supervisor.stop_grace ${formatDuration(c.supervisor.stopGraceMs)} leaves an engine no time to drain; set it to at least ${formatDuration(MIN_STOP_GRACE_MS)} (${where('supervisor.stop_grace')})`,
    );
  }
  const badProperty = checkUnitProperties(c.supervisor.unitProperties ?? {});
  if (badProperty) throw configError(`supervisor.unit_properties: ${badProperty} (${where('supervisor.unit_properties')})`);
  checkModelsConfig(c.models, where);
  checkGangAddr(c, where);
  const hub = new URL(c.models.hub.endpoint);
  if (hub.protocol === 'http:' && !isLoopbackHost(hub.hostname) && !c.insecurePlaintext) {
    // In clear the token travels readable, and whoever is on the way serves any bytes: the digests come in the same answer (security review 3, S4).
    throw configError(
      `models.hub.endpoint ${c.models.hub.endpoint} is plaintext http:// to a host that is not loopback; use https://, or set insecure_plaintext: true if this network is isolated (${where('models.hub.endpoint')})`,
    );
  }
  const seen = new Set<string>();
  for (const f of c.fabrics) {
    if (seen.has(f.hca)) throw configError(`fabrics: hca ${f.hca} is listed twice (${where('fabrics')})`);
    seen.add(f.hca);
  }
}

/** server, and the TLS it needs: its scheme and host, the certificates, their files. */
function checkServer(c: AgentConfig, secure: boolean, where: (key: string) => string): void {
  const server = c.server;
  if (!server.includes('://')) {
    // Guessing the scheme from the TLS settings once turned a typo in tls
    // into a silent plaintext connection; the operator says which it is.
    throw configError(
      `server ${JSON.stringify(server)} has no scheme; write https://${server} (mutual TLS) or http://${server} (plaintext, loopback only unless insecure_plaintext: true) (${where('server')})`,
    );
  }
  let url: URL;
  try {
    url = new URL(server);
    if (url.hostname === '') throw new Error('no host');
  } catch {
    throw configError(`server ${JSON.stringify(server)} is not a valid address; write it like https://control-plane:8443 (${where('server')})`);
  }
  if (url.protocol === 'https:') {
    if (!secure) throw configError(`server is an https:// address but no tls certificates are configured; set tls.cert, tls.key and tls.ca (${where('server')})`);
    if ((c.tls.cert === '') !== (c.tls.key === '')) {
      const missing = c.tls.cert === '' ? 'tls.cert' : 'tls.key';
      throw configError(`${missing} is required with ${missing === 'tls.cert' ? 'tls.key' : 'tls.cert'}: mutual TLS needs both (${where(missing === 'tls.cert' ? 'tls.key' : 'tls.cert')})`);
    }
    // Server-only TLS (a CA alone) is refused: the control plane could not
    // tell this node from any host that knows its address, which is not the
    // mutual TLS the docs promise.
    if (c.tls.cert === '') {
      throw configError(`tls.cert and tls.key are required with an https:// server: the agent authenticates to the control plane with mutual TLS (${where('tls.ca')})`);
    }
  } else if (url.protocol === 'http:') {
    if (secure) throw configError(`tls is configured but server is an http:// address; use https:// (${where('server')})`);
    if (!isLoopbackHost(url.hostname) && !c.insecurePlaintext) {
      // On h2c nothing authenticates the control plane, and it decides what
      // runs as root here: whoever can spoof DNS or ARP on the way owns the node.
      throw configError(
        `server ${server} is plaintext http:// to a host that is not loopback; use https:// with tls, or set insecure_plaintext: true if this network is isolated (${where('server')})`,
      );
    }
  } else {
    throw configError(`server ${JSON.stringify(server)} must be an http:// or https:// address (${where('server')})`);
  }

  if (secure) {
    const present = new Set<string>();
    for (const key of ['tls.cert', 'tls.key', 'tls.ca'] as const) {
      const file = c.tls[key.slice(4) as 'cert' | 'key' | 'ca'];
      if (file === '') continue;
      try {
        accessSync(file, constants.R_OK);
        present.add(key);
      } catch (err) {
        // Not written yet (a Vault agent, cert-manager or SPIRE racing the
        // boot): the connection waits for it. One that exists and cannot be
        // read is a mistake no waiting fixes.
        if (errnoCode(err) === 'ENOENT') continue;
        throw configError(`${key}: cannot read ${file}: ${describeErrno(err)} (${where(key)})`);
      }
    }
    if (present.has('tls.cert') && present.has('tls.key')) {
      // A key that is not the certificate's is permanent: refused here
      // (exit 78) rather than retried for ever with OpenSSL's bare mismatch.
      let problem: string | undefined;
      try {
        problem = keyPairProblem(readFileSync(c.tls.cert), readFileSync(c.tls.key), c.tls.cert, c.tls.key);
      } catch {
        // Gone between the two calls: the connection reports it.
      }
      if (problem) throw configError(`${problem} (${where('tls.key')})`);
    }
  }
}
