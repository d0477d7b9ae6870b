/** The node-local model store (src/models/); off when cacheDir is empty. */
export interface ModelsConfig {
  /** Absolute directory; '' turns the store off. */
  cacheDir: string;
  /** Disk the store may use, in bytes; set whenever cacheDir is (checkModelsConfig). */
  budget?: number;
  hub: {
    /** http(s) base URL of the hub, e.g. https://huggingface.co. */
    endpoint: string;
    /** File holding the hub token; '' for none. */
    tokenFile: string;
    /** models.hub.redirect_hosts: private hosts (names or addresses, comma or space separated) a hub's redirect may reach; '' for none. */
    redirectHosts?: string;
  };
  /** Files one process downloads at once; at least 1. */
  maxConcurrent: number;
  /** Bytes per second shared by a process's downloads; undefined is unlimited. */
  bandwidth?: number;
}
