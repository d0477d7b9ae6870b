import { ListrLogger, ProcessOutput } from 'listr2';

/**
 * The listr2 options every llmgw progress display shares: its lines on
 * stderr (stdout stays the command's result, for pipes and --json), the
 * plain renderer where there is no terminal, and no signal handlers of its
 * own (Ctrl-C ends the command the way the command says, not through listr).
 */
export function progressListrOptions<R extends string>(renderer: R) {
  const logger = new ListrLogger({ processOutput: new ProcessOutput(process.stderr, process.stderr) });
  return {
    renderer,
    fallbackRenderer: 'simple' as const,
    rendererOptions: { logger },
    fallbackRendererOptions: { logger },
    registerSignalListeners: false,
  };
}
