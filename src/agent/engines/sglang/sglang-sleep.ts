import type { EngineSleepApi, SleepLevel } from '../../../lib/engine-sleep-api.js';

/** Both levels are one: the release keeps the weights in host RAM, the resume puts them back. */
const SGLANG_LEVEL: SleepLevel = {
  sleep: { method: 'POST', path: '/release_memory_occupation', body: '{}' },
  wake: { resume: [{ method: 'POST', path: '/resume_memory_occupation', body: '{}' }], restore: [] },
  hostCopy: true,
};

/**
 * SGLang's sleep API (S: at 71de97b): `POST /release_memory_occupation` and
 * `/resume_memory_occupation` with `{}` for every tag
 * (S:python/sglang/srt/entrypoints/http_server.py:1482-1503,
 * io_struct.py:1944-1947; the body is required, http_server.py:589-632).
 * The release keeps the weights only when the engine was started with
 * --enable-weights-cpu-backup (S:python/sglang/srt/server_args.py:3483-3492;
 * model_executor/load_model_utils.py:281-300), which the agent gives every
 * sleep profile (sglang-engine.ts): the flag is the process's, so both
 * levels copy the weights to host RAM and the resume copies them back. No
 * reload from the store: `POST /update_weights_from_disk` (what SGLang's
 * maintainers advise for paused weights without a backup,
 * sgl-project/sglang#6367) also renames the served model to the path it
 * loaded (`self.served_model_name = obj.model_path`,
 * S:python/sglang/srt/managers/tokenizer_manager.py:2099-2103), so a
 * router asking for the served name would be refused or misrouted, and with
 * the backup the weights are already back. The known answer proves they
 * are (known-answer.ts). Around it,
 * `POST /pause_generation {"mode":"abort"}` and `/continue_generation {}`:
 * abort, since at 71de97b a retracted request waits in the queue and the
 * release's idle assertion would fail (scheduler.py:4083-4105, 4584-4650).
 * No asleepQuery: nothing SGLang serves says whether its memory is released
 * (the release's and resume's outputs are empty, managers/io_struct.py:1950-1951,
 * 1960-1961; offload_tags is never exported, weight_updater.py:85, 213, 255;
 * the memory figures of /server_info, /v1/loads and /metrics are the load's,
 * scheduler.py:4281-4297, 559), so an adopted shard's sleep is its state
 * file's word, and said to be (adopted-sleep-steps.ts; docs/engines.md).
 */
export const SGLANG_SLEEP_API: EngineSleepApi = {
  levels: { 1: SGLANG_LEVEL, 2: SGLANG_LEVEL },
  hostCopyKept: true,
  mustBeIdle: true,
  hold: {
    pause: { method: 'POST', path: '/pause_generation', body: '{"mode":"abort"}' },
    resume: { method: 'POST', path: '/continue_generation', body: '{}' },
  },
  wakeOnlyAsleep: true,
  healthNeedsModel: true,
};
