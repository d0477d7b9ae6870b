import type { StartShard } from '../../../gen/llmgw/v1/agent_pb.js';
import { failure } from '../../../lib/errors.js';
import { findFlags } from '../../engines/find-flags.js';
import { dataParallelSize } from '../../engines/vllm/vllm-engine.js';

/*
 * Sleeps an engine cannot survive (issue 47 item 5; review engine-fidelity-3
 * E3, E5, E6): refused before anything is touched, each in one line naming
 * why and what to do. Pure: the engine's version is read at READY
 * (engine-version.ts) and passed in.
 */

/**
 * The first vLLM release whose partial wake keeps the scheduler paused, and
 * whose DP engine runs no dummy batch while asleep: PR #44483 (commit
 * 93ec6458, merged to main 2026-06-24; the bug, #44395, was reported on
 * 0.22.0). Before it `EngineCore.wake_up` ended with `self.resume_scheduler()`
 * for every wake, so after `/wake_up?tags=weights` a queued request ran a
 * forward on the unmapped KV cache ("CUDA error: an illegal memory access"),
 * and `DPEngineCoreProc` ran `execute_dummy_batch()` while asleep; from it
 * the scheduler resumes only when `not self.model_executor.is_sleeping`
 * (V:vllm/v1/engine/core.py:917-921). v0.23.0's branch (upstream-v0.23.0,
 * last commit 2026-06-14) lacks it; v0.24.0's release branch, cut from main
 * on 2026-06-23, carries it as the cherry-pick 6ed56e04ff (2026-06-25; seen
 * in neuralmagic/vllm's varun/v0.24.0). No 0.23.x patch release carrying it
 * was found, so 0.24.0 is the floor: a 0.23.x that has it is refused, the
 * safe side.
 */
export const VLLM_PARTIAL_WAKE_FIXED = '0.24.0';

/**
 * `--load-format` values whose loader can reload in place: only
 * DefaultModelLoader has get_all_weights (V:vllm/model_executor/model_loader/default_loader.py:321;
 * the map at V:vllm/model_executor/model_loader/__init__.py:33-62), and
 * reload_weights raises NotImplementedError for any other
 * (V:vllm/v1/worker/gpu_model_runner.py:5671-5676).
 */
export const RELOADABLE_LOAD_FORMATS: readonly string[] = ['auto', 'hf', 'safetensors', 'pt', 'npcache', 'fastsafetensors', 'instanttensor', 'mistral'];

/** Whether vLLM `version` carries #44483; undefined when it cannot be read as one. A pre-release of the floor (rc, dev) is below it. */
export function vllmHasPartialWakeFix(version: string | undefined): boolean | undefined {
  const m = /^v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$/.exec(version?.trim() ?? '');
  if (!m) return undefined;
  const got = [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
  const floor = VLLM_PARTIAL_WAKE_FIXED.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((got[i] as number) !== (floor[i] as number)) return (got[i] as number) > (floor[i] as number);
  // Equal numbers: 0.24.0 and 0.24.0.post1 or +cu129 carry it; 0.24.0rc1 or 0.24.0.dev5 may not (PEP 440 orders them first).
  return !/^(\.?(a|b|rc|dev|alpha|beta|pre|c)\d*)/i.test(m[4] ?? '');
}

/** vLLM's speculative decoding options (V:vllm/engine/arg_utils.py:1626-1632): -sc is --speculative-config; --spec-* set its fields. */
const SPEC_FLAGS = ['--speculative-config', '-sc', '--spec-method', '--spec-model', '--spec-tokens'];
const FLAGS = { flags: [...SPEC_FLAGS, '--load-format'], flexible: true } as const;

/**
 * Speculative methods that load no draft weights (n-gram lookups, suffix
 * trees; SpeculativeMethod, V:vllm/config/speculative.py:63, 69-79): nothing
 * for a level-2 sleep to lose.
 */
const DRAFTLESS_METHODS = ['ngram', 'ngram_gpu', 'suffix'];

/** The speculative method a profile's args name, '' when they name none they can be read for, undefined when they configure no speculation. */
function speculativeMethod(args: readonly string[]): string | undefined {
  const hits = findFlags(args, FLAGS).filter((h) => SPEC_FLAGS.includes(h.flag));
  if (hits.length === 0) return undefined;
  let method = '';
  for (const h of hits) {
    if (h.flag === '--spec-method' || (h.given.startsWith('--speculative') && args[h.index]?.includes('.method'))) method = h.value ?? '';
    else if (h.flag === '--speculative-config' || h.flag === '-sc') {
      try {
        const m = (JSON.parse(h.value ?? '') as { method?: unknown }).method;
        if (typeof m === 'string') method = m;
      } catch {
        // Not JSON (a dotted field, a file): the method stays unknown.
      }
    }
  }
  return method;
}

/** What a profile's args give `flag`, the last winning as in argparse: undefined when unset, '' when set without a value. */
function lastValue(args: readonly string[], flag: string): string | undefined {
  const hit = findFlags(args, FLAGS)
    .filter((h) => h.flag === flag)
    .at(-1);
  return hit && (hit.value ?? '');
}

/**
 * Throws a one-line refusal when engine of `spec` cannot survive a sleep at
 * `level` and its wake; `version` is what the engine said at READY
 * (undefined: not read). Only vLLM has such sleeps: SGLang's are judged by
 * the host room its pinned copy needs (host-room.ts).
 */
export function judgeSurvival(spec: StartShard, level: 1 | 2, version: string | undefined): void {
  if (spec.profile?.engine !== 'vllm') return;
  const args = spec.profile.args;
  let dp = 1;
  try {
    dp = dataParallelSize(args);
  } catch {
    // Validated at the start; never here.
  }
  if (level === 2 || dp > 1) {
    const fixed = vllmHasPartialWakeFix(version);
    const what = level === 2 ? 'a level-2 wake' : `a sleep of data-parallel size ${dp}`;
    const crash = level === 2 ? 'resumes its scheduler after the weights alone and a queued request crashes it' : 'runs a dummy batch on its released memory and crashes';
    if (fixed === undefined) {
      throw failure(`sleep refused: vLLM version unknown (GET /version gave ${version === undefined ? 'no answer' : JSON.stringify(version)}), and before ${VLLM_PARTIAL_WAKE_FIXED} (#44483) ${what} ${crash}; ${dp > 1 ? 'stop the shard instead' : 'use level 1'}, or run vLLM >= ${VLLM_PARTIAL_WAKE_FIXED}`);
    }
    if (!fixed) {
      throw failure(`sleep refused: vLLM ${version} lacks #44483 (first in ${VLLM_PARTIAL_WAKE_FIXED}): ${what} ${crash} ("CUDA error: an illegal memory access"); ${dp > 1 ? 'stop the shard instead' : 'use level 1'}, or run vLLM >= ${VLLM_PARTIAL_WAKE_FIXED}`);
    }
  }
  if (level !== 2) return;
  const method = speculativeMethod(args);
  if (method !== undefined && !DRAFTLESS_METHODS.includes(method)) {
    throw failure(`sleep refused: level 2 with --speculative-config${method ? ` (${method})` : ''}: vLLM's reload_weights reloads the target model only and the draft stays discarded (vLLM #52479), so the shard would serve at no speed-up; use level 1`);
  }
  const format = lastValue(args, '--load-format');
  if (format !== undefined && !RELOADABLE_LOAD_FORMATS.includes(format)) {
    throw failure(`sleep refused: level 2 with --load-format ${format}: its loader cannot reload (reload_weights raises NotImplementedError), so the shard could never be woken; use level 1, or a load format of ${RELOADABLE_LOAD_FORMATS.join(', ')}`);
  }
}
