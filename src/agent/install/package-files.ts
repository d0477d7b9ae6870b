import { fileURLToPath } from 'node:url';

/*
 * Files the installed package carries for production (package.json "files"), found from this
 * module's own location: a GPU node has only the tgz, no checkout, so the unit and the example
 * configuration must come from wherever npm put the package (`$(npm root -g)/llmgw`).
 */

/** The entry point an installed unit runs with node, never the `llmgw` symlink whose place depends on npm's prefix. */
export const PACKAGE_BIN_JS = fileURLToPath(new URL('../../../bin/run.js', import.meta.url));
export const AGENT_UNIT_TEMPLATE = fileURLToPath(new URL('../../../packaging/llmgw-agent.service', import.meta.url));
export const EXAMPLE_AGENT_CONFIG = fileURLToPath(new URL('../../../examples/agent.yaml', import.meta.url));
