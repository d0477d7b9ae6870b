import { describe, expect, it } from 'vitest';
import { unitExitOf } from '../../../src/lib/systemd/unit-exit.js';
import { parseShow, type UnitStatus } from '../../../src/lib/systemd/read-unit-status.js';

/** Properties as `systemctl show` printed them for real units in the lab (test/systemd). */
const status = (text: string) => parseShow(text) as UnitStatus;

describe('unitExitOf', () => {
  it('reads a death by signal and an exit code as systemd recorded them', () => {
    expect(unitExitOf(status('ExecMainPID=13\nExecMainCode=2\nExecMainStatus=9\nResult=signal'), 13)).toEqual({ code: null, signal: 'SIGKILL' });
    expect(unitExitOf(status('ExecMainPID=13\nExecMainCode=1\nExecMainStatus=3\nResult=exit-code'), 13)).toEqual({ code: 3, signal: null });
    expect(unitExitOf(status('ExecMainPID=13\nExecMainCode=3\nExecMainStatus=6\nResult=core-dump'), 13)).toEqual({ code: null, signal: 'SIGABRT' });
  });

  it('says nothing while the process runs or has not been reaped, or for another run', () => {
    expect(unitExitOf(status('ExecMainPID=13\nExecMainCode=0\nExecMainStatus=0'), 13)).toBeUndefined();
    expect(unitExitOf(status('ExecMainPID=14\nExecMainCode=2\nExecMainStatus=9'), 13)).toBeUndefined();
  });
});
