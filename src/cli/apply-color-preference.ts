import chalk from 'chalk';
import { effectivePreference, type Preferences } from './cli-preferences.js';

/**
 * Applies the `color` preference (LLMGW_COLOR, else `llmgw config`) to chalk,
 * which every table and renderer colours through. NO_COLOR and FORCE_COLOR
 * are the terminal world's own switches and outrank a stored preference, so
 * with either set chalk decides as it always has.
 */
export function applyColorPreference(stored: Preferences, env: NodeJS.ProcessEnv = process.env): void {
  if (env.NO_COLOR !== undefined || env.FORCE_COLOR !== undefined) return;
  const color = effectivePreference('color', stored, env);
  if (color === 'never') chalk.level = 0;
  else if (color === 'always' && chalk.level === 0) chalk.level = 1;
}
