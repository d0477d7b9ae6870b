import { describe, expect, it } from 'vitest';
import { ShardState } from '../../../src/gen/llmgw/v1/agent_pb.js';
import { captureLogger } from '../../helpers/capture-logger.js';
import { shardSpec, until } from '../../helpers/engine-processes.js';
import { useSupervisors } from '../../helpers/use-supervisors.js';

const harness = useSupervisors();

describe('the reactions to a shard transition', () => {
  it('run in the order they were added, one throwing named in the log while the ones after it still run', async () => {
    const { logger, records } = captureLogger('info');
    const sup = harness.newSupervisor({}, { logger });
    const ran: string[] = [];
    sup.react({ name: 'first', on: (t) => void ran.push(`first ${ShardState[t.to]}`) });
    sup.react({
      name: 'model unpinned',
      on: () => {
        throw new Error('boom');
      },
    });
    sup.react({ name: 'last', on: (t) => void ran.push(`last ${ShardState[t.to]}`) });
    await sup.start(shardSpec('r1'), { plan: { argv: [process.execPath, '-e', 'setInterval(() => {}, 1 << 30)'], env: {} }, servesHttp: false });
    await until(() => ran.includes('last STARTING'), 'the reactions to STARTING');
    expect(ran.slice(0, 2)).toEqual(['first STARTING', 'last STARTING']);
    const threw = records.filter((r) => r.msg === 'a shard reaction threw');
    expect(threw[0]).toMatchObject({ shard: 'r1', reaction: 'model unpinned', err: 'boom' });
    // The innocent look-alike: reactions that do not throw are never logged as throwing.
    expect(threw.every((r) => r.reaction === 'model unpinned')).toBe(true);
  });
});
