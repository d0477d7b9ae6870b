import { isAbsolute, normalize } from 'node:path';
import { nearestName } from '../../lib/nearest-name.js';
import { defaultEngineConfig } from './default-engine-config.js';
import { ENV_PATTERN } from './env-allowlist.js';
import { findUser } from './find-user.js';
import { ENGINE_NAMES, type EngineName, isEngineName } from '../../lib/engine-names.js';
import type { EngineConfig, EngineUser } from './agent-config.js';
import { describeValue } from '../../lib/describe-value.js';
import { isRecord } from './is-record.js';

export const ENGINE_KEYS = ['command', 'env', 'extra_args', 'allowed_env', 'allowed_args', 'model_roots', 'user', 'allow_root', 'allow_sleep_mode', 'sleep_port_guard', 'profile_users', 'enabled'] as const;

/** An option as an operator lists it in allowed_args: `--name`, the long form the engine's parser declares. */
const LONG_FLAG = /^--[A-Za-z0-9][A-Za-z0-9_-]*$/;

/**
 * The `engines` map: per engine, its settings over the engine's defaults.
 * `bad` makes the error, naming the key and where it was written.
 */
export function parseEnginesConfig(v: Record<string, unknown>, bad: (p: string) => Error): Partial<Record<EngineName, EngineConfig>> {
  const out: Partial<Record<EngineName, EngineConfig>> = {};
  for (const [name, settings] of Object.entries(v)) {
    if (!isEngineName(name)) {
      const guess = nearestName(name, ENGINE_NAMES);
      throw bad(`unknown engine ${name}${guess ? `; did you mean ${guess}?` : `; known engines: ${ENGINE_NAMES.join(', ')}`}`);
    }
    const s = settings ?? {};
    if (!isRecord(s)) throw bad(`${name} must be a map of ${ENGINE_KEYS.join(', ')}`);
    const cfg = defaultEngineConfig(name as EngineName);
    for (const [k, x] of Object.entries(s)) {
      if (k === 'command') {
        if (typeof x === 'string') {
          // A string is one executable path, never split: engine commands are
          // argv arrays so that nothing in them is interpreted by a shell.
          if (/\s/.test(x)) throw bad(`${name}.command ${JSON.stringify(x)} looks like a shell string; give an argv list, e.g. [/opt/vllm/bin/vllm, serve]`);
          cfg.command = [x];
        } else if (Array.isArray(x) && x.length > 0 && x.every((a) => typeof a === 'string' && a !== '')) {
          cfg.command = x as string[];
        } else {
          throw bad(`${name}.command must be a non-empty list of strings (argv), got ${describeValue(x)}`);
        }
      } else if (k === 'env') {
        if (!isRecord(x)) throw bad(`${name}.env must be a map of strings, got ${describeValue(x)}`);
        cfg.env = Object.fromEntries(Object.entries(x).map(([ek, ev]) => [ek, String(ev)]));
      } else if (k === 'extra_args') {
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string' || typeof a === 'number')) {
          throw bad(`${name}.extra_args must be a list of strings, got ${describeValue(x)}`);
        }
        cfg.extraArgs = x.map(String);
      } else if (k === 'allowed_env') {
        if (x === null) {
          cfg.allowedEnv = [];
          continue;
        }
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string')) {
          throw bad(`${name}.allowed_env must be a list of variable names or NAME_* prefixes, got ${describeValue(x)}`);
        }
        const wrong = x.find((p) => !ENV_PATTERN.test(p));
        if (wrong !== undefined) {
          throw bad(`${name}.allowed_env: ${JSON.stringify(wrong)} is not a variable name or a NAME_* prefix (only a trailing * is a wildcard)`);
        }
        cfg.allowedEnv = x;
      } else if (k === 'allowed_args') {
        if (x === null) {
          cfg.allowedArgs = [];
          continue;
        }
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string')) {
          throw bad(`${name}.allowed_args must be a list of flags such as --trust-remote-code, got ${describeValue(x)}`);
        }
        const wrong = x.find((a) => !LONG_FLAG.test(a));
        if (wrong !== undefined) {
          throw bad(`${name}.allowed_args: ${JSON.stringify(wrong)} is not a flag; list each option by its long name, e.g. --trust-remote-code (no value, no =)`);
        }
        cfg.allowedArgs = x;
      } else if (k === 'model_roots') {
        if (x === null) {
          cfg.modelRoots = [];
          continue;
        }
        if (!Array.isArray(x) || !x.every((a) => typeof a === 'string')) {
          throw bad(`${name}.model_roots must be a list of absolute directories, got ${describeValue(x)}`);
        }
        // A relative root would depend on the agent's working directory, and
        // "/" would make every file of the node a model.
        const wrong = x.find((r) => !isAbsolute(r) || normalize(r) === '/');
        if (wrong !== undefined) {
          throw bad(`${name}.model_roots: ${JSON.stringify(wrong)} is not an absolute directory below /; give the directories that hold the models, e.g. /models`);
        }
        cfg.modelRoots = x.map((r) => normalize(r).replace(/(.)\/$/, '$1'));
      } else if (k === 'allow_root') {
        if (typeof x !== 'boolean') throw bad(`${name}.allow_root must be true or false, got ${describeValue(x)}`);
        cfg.allowRoot = x;
      } else if (k === 'allow_sleep_mode') {
        if (name !== 'vllm') throw bad(`${name}.allow_sleep_mode: only vLLM's sleep mode opens endpoints without a key; remove the key (sleep_mode needs no opt-in for ${name})`);
        if (typeof x !== 'boolean') throw bad(`${name}.allow_sleep_mode must be true or false, got ${describeValue(x)}`);
        cfg.allowSleepMode = x;
      } else if (k === 'sleep_port_guard') {
        if (name === 'sim') throw bad(`sim.sleep_port_guard: the sim's sleep opens nothing; remove the key`);
        if (x !== 'nftables' && x !== 'none') throw bad(`${name}.sleep_port_guard must be nftables or none, got ${describeValue(x)}`);
        cfg.sleepPortGuard = x;
      } else if (k === 'profile_users') {
        if (x === null) continue;
        if (!isRecord(x)) throw bad(`${name}.profile_users must be a map of profile name to account name, got ${describeValue(x)}`);
        const users: Record<string, EngineUser> = {};
        for (const [profile, account] of Object.entries(x)) {
          if (typeof account !== 'string' || account === '') throw bad(`${name}.profile_users.${profile} must be an account name, got ${describeValue(account)}`);
          const user = findUser(account);
          if (!user) throw bad(`${name}.profile_users.${profile}: no account named ${JSON.stringify(account)} on this node; create it (useradd --system ${account}) or fix the name`);
          if (user.uid === 0) throw bad(`${name}.profile_users.${profile}: ${account} is root; name an unprivileged account`);
          users[profile] = user;
        }
        cfg.profileUsers = users;
      } else if (k === 'user') {
        if (x === null || x === '') continue;
        if (typeof x !== 'string') throw bad(`${name}.user must be an account name, got ${describeValue(x)}`);
        const user = findUser(x);
        if (!user) throw bad(`${name}.user: no account named ${JSON.stringify(x)} on this node; create it (useradd --system ${x}) or fix the name`);
        cfg.user = user;
      } else if (k === 'enabled') {
        if (typeof x !== 'boolean') throw bad(`${name}.enabled must be true or false, got ${describeValue(x)}`);
        cfg.enabled = x;
      } else {
        const guess = nearestName(k, ENGINE_KEYS);
        throw bad(`unknown key ${name}.${k}${guess ? `; did you mean ${guess}?` : ''}`);
      }
    }
    out[name as EngineName] = cfg;
  }
  return out;
}
