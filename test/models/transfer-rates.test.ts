import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readTransferRates, transferRates } from '../../src/models/transfer-rates.js';

/*
 * Inventory.rates (issue 52, item 5): the node's measured disk write (a
 * probe), cold disk read (its last warm) and last pull, in bytes per second
 * with how and when; `discover` reads them from the agent's warmth file.
 */

const dir = mkdtempSync(join(tmpdir(), 'llmgw-rates-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MiB = 1024 * 1024;

describe('transferRates', () => {
  it('gives each measured rate in bytes per second with its source and time, and nothing when none is measured', () => {
    const r = transferRates({ diskWrite: { bytes: 64 * MiB, ms: 100, atMs: 1_000_000 }, hub: { bytes: 128 * MiB, ms: 2000, atMs: 2_000_000 } });
    expect(r?.diskWrite?.bytesPerSecond).toBe(640 * MiB);
    expect(r?.diskWrite?.source).toBe('probe');
    expect(r?.diskWrite?.bytes).toBe(BigInt(64 * MiB));
    expect(Number(r?.diskWrite?.measuredAt?.seconds)).toBe(1000);
    expect(r?.lastPull?.bytesPerSecond).toBe(64 * MiB);
    expect(r?.lastPull?.source).toBe('pull');
    expect(r?.diskRead).toBeUndefined();
    expect(transferRates({})).toBeUndefined();
  });

  it("reads an agent's kept rates, dropping what no measure could be, and none from a file it cannot read", () => {
    const path = join(dir, 'warmth.json');
    writeFileSync(path, JSON.stringify({ version: 1, entries: [], rates: { disk: { bytes: 256 * MiB, ms: 500, atMs: 5 }, hub: { bytes: 1024, ms: 10, atMs: 5 }, diskWrite: { bytes: 64 * MiB, ms: 0, atMs: 5 } } }));
    // Too few bytes to be a rate, and a time of 0, are dropped; the warm's read is kept.
    expect(readTransferRates(path)).toEqual({ disk: { bytes: 256 * MiB, ms: 500, atMs: 5 } });
    expect(readTransferRates(join(dir, 'missing.json'))).toEqual({});
    writeFileSync(join(dir, 'torn.json'), '{"version": 1, "rates": {');
    expect(readTransferRates(join(dir, 'torn.json'))).toEqual({});
  });
});
