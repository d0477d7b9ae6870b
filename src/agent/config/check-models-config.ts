import { isAbsolute } from 'node:path';
import { configError } from '../../lib/errors.js';
import { hostIdentity } from '../../models/address-class.js';
import { splitHostList } from '../../models/model-store-options.js';
import type { ModelsConfig } from './agent-config.js';

/**
 * The models.* rules that span keys or need more than a type. The store is
 * off unless cache_dir is set, so a node that never pulls is not bothered;
 * once it is set, a budget is required: a store without one fills the disk
 * the engines' logs and the state files share.
 */
export function checkModelsConfig(m: ModelsConfig, where: (key: string) => string): void {
  if (m.cacheDir !== '' && !isAbsolute(m.cacheDir)) {
    throw configError(`models.cache_dir ${JSON.stringify(m.cacheDir)} must be an absolute path (${where('models.cache_dir')})`);
  }
  if (m.cacheDir !== '' && m.budget === undefined) {
    throw configError(`models.budget is required with models.cache_dir; write it like 500GiB (${where('models.cache_dir')})`);
  }
  let url: URL | undefined;
  try {
    url = new URL(m.hub.endpoint);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'https:' && url.protocol !== 'http:') || url.hostname === '') {
    throw configError(`models.hub.endpoint ${JSON.stringify(m.hub.endpoint)} is not an http:// or https:// address; write it like https://huggingface.co (${where('models.hub.endpoint')})`);
  }
  if (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    // A token in the URL would be logged with it; the token belongs in models.hub.token_file.
    throw configError(`models.hub.endpoint must be a plain base address without credentials, query or fragment (${where('models.hub.endpoint')})`);
  }
  if (m.hub.tokenFile !== '' && !isAbsolute(m.hub.tokenFile)) {
    throw configError(`models.hub.token_file ${JSON.stringify(m.hub.tokenFile)} must be an absolute path (${where('models.hub.token_file')})`);
  }
  for (const host of splitHostList(m.hub.redirectHosts ?? '')) {
    if (!/^[a-z0-9.:[\]_-]+$/i.test(host)) {
      throw configError(`models.hub.redirect_hosts: ${JSON.stringify(host.slice(0, 80))} is not a host name or address (no scheme, port or path) (${where('models.hub.redirect_hosts')})`);
    }
    const cls = hostIdentity(host).cls;
    if (cls !== 'name' && cls !== 'private') {
      const what = cls === 'public' ? 'a public address, which a redirect reaches without being listed' : `a ${cls} address, which no redirect is ever followed to`;
      throw configError(`models.hub.redirect_hosts: ${JSON.stringify(host)} is ${what}; list only your mirror's private hosts (${where('models.hub.redirect_hosts')})`);
    }
  }
  if (m.maxConcurrent < 1) {
    throw configError(`models.max_concurrent must be at least 1, got ${m.maxConcurrent} (${where('models.max_concurrent')})`);
  }
}
