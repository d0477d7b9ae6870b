import type { ModelsConfig } from './models-config.js';
import { configError } from '../lib/errors.js';
import { BandwidthLimiter } from './bandwidth-limiter.js';
import { ConcurrencyLimit } from './concurrency-limit.js';
import type { PullContext } from './pull-model.js';
import { StoreLayout } from './store-layout.js';

/** models.hub.redirect_hosts: names or addresses, comma or space separated. */
export function splitHostList(text: string): string[] {
  return text.split(/[\s,]+/).filter((h) => h !== '');
}

/** What a pull needs from the agent's configuration, less the signal and the listener. */
export type ModelStore = Omit<PullContext, 'signal' | 'onEvent'>;

/**
 * The model store of models.* config; a configuration error (exit 78) when
 * models.cache_dir is not set, naming the key. One limiter and one
 * concurrency limit per call: a process makes one.
 */
export function modelStoreFromConfig(models: ModelsConfig, configPath: string): ModelStore {
  if (models.cacheDir === '') {
    throw configError(`models.cache_dir is not set in ${configPath}: the node has no model store; set models.cache_dir and models.budget`);
  }
  return {
    layout: new StoreLayout(models.cacheDir),
    hub: { endpoint: models.hub.endpoint, tokenFile: models.hub.tokenFile, redirectHosts: splitHostList(models.hub.redirectHosts ?? '') },
    budget: models.budget as number,
    concurrency: new ConcurrencyLimit(models.maxConcurrent),
    limiter: new BandwidthLimiter(models.bandwidth),
  };
}
