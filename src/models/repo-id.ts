import { usageError } from '../lib/errors.js';

/**
 * A hub repo id names directories (models--org--name, the pins and locks of
 * llmgw), so only huggingface_hub's own alphabet is accepted
 * (validate_repo_id: letters, digits, `.`, `_`, `-`, at most 96 characters a
 * part) and, as there, neither `--` (the folder name's separator, so two ids
 * could name one folder) nor `..` (a path out of the store).
 */
const REPO_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/;

/** A branch, tag or commit: refs/<revision> is a file, so no `..`, no empty or hidden segment. */
const REVISION = /^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)*$/;

export const COMMIT_HASH = /^[0-9a-f]{40}$/;

/** A value someone sent, quoted for an error: at most 80 characters (a 100 KB repo id became every refusal's message). */
function quote(v: string): string {
  const q = JSON.stringify(v);
  return q.length > 80 ? `${q.slice(0, 76)}..."` : q;
}

/** The problem with `repo` as a hub model id, or undefined when it is one. */
export function repoIdProblem(repo: string): string | undefined {
  if (!REPO_ID.test(repo)) {
    return `${quote(repo)} is not a hub model id; write it like org/name (letters, digits, . _ -)`;
  }
  if (repo.includes('--') || repo.includes('..')) return `${quote(repo)} may not contain -- or ..`;
  return undefined;
}

export function checkRepoId(repo: string): string {
  const problem = repoIdProblem(repo);
  if (problem) throw usageError(problem);
  return repo;
}

export function checkRevision(revision: string): string {
  if (revision.length > 128 || !REVISION.test(revision) || revision.includes('..')) {
    throw usageError(`revision ${quote(revision)} is not a branch, tag or commit; write it like main, v1.0 or a 40-digit commit hash`);
  }
  return revision;
}

/** huggingface_hub's repo_folder_name for a model: "org/name" → "models--org--name". */
export function repoFolderName(repo: string): string {
  return ['models', ...repo.split('/')].join('--');
}

/** The repo id a store folder holds, or undefined for a folder that is not a model's. */
export function repoFromFolderName(folder: string): string | undefined {
  const m = /^models--([^/]+?)--([^/]+)$/.exec(folder);
  if (!m) return undefined;
  const repo = `${m[1]}/${m[2]}`;
  return repoIdProblem(repo) === undefined ? repo : undefined;
}
