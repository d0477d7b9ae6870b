import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import { sameLinks, wireInventory } from '../../../src/agent/connection/inventory-wire.js';
import { buildRegister, describeNode } from '../../../src/agent/connection/register-message.js';
import { AgentMessageSchema, GpuLinkSchema, GpuSchema, HcaSchema, type Inventory, InventorySchema } from '../../../src/gen/llmgw/v1/agent_pb.js';

/** A box of `n` GPUs on one NVLink switch, as parse-topo-matrix.ts lists `nvidia-smi topo -m`: every ordered pair. */
function box(n: number, connection = 'NV18'): Inventory {
  const links = [];
  for (let a = 0; a < n; a++) for (let b = 0; b < n; b++) if (a !== b) links.push(create(GpuLinkSchema, { a: `GPU${a}`, b: `GPU${b}`, connection, nvlinks: connection.startsWith('NV') ? 18 : 0 }));
  return create(InventorySchema, {
    gpus: Array.from({ length: n }, (_, index) => create(GpuSchema, { index, uuid: `GPU-${index}`, name: 'NVIDIA H100 80GB HBM3', memoryTotalMb: 81559, healthy: true })),
    links,
    hcas: [create(HcaSchema, { name: 'mlx5_0', port: 1, state: 'ACTIVE', rateGbps: 400 })],
    warnings: ['a warning'],
    driverVersion: '550.54.15',
    hostname: 'gpu-node-7',
  });
}

/** What the control plane reads: the message as sent, decoded. */
const sent = (inventory: Inventory) => {
  const m = fromBinary(AgentMessageSchema, toBinary(AgentMessageSchema, create(AgentMessageSchema, { messageId: 1n, msg: { case: 'inventory', value: inventory } })));
  if (m.msg.case !== 'inventory') throw new Error('not an inventory');
  return m.msg.value;
};

describe('wireInventory: the Inventory as the stream carries it', () => {
  it('decodes to the same Inventory, every link in its order, as the message encoded field by field', () => {
    const inv = box(8);
    const wire = wireInventory(inv);
    expect(wire.links).toEqual([]);
    expect(sent(wire)).toEqual(sent(inv));
    expect(sent(wire).links.map((l) => `${l.a}-${l.b}`)).toEqual(inv.links.map((l) => `${l.a}-${l.b}`));
    expect(sent(wire).links).toHaveLength(56);
    // The inventory itself is left as it was (ctl status and the cache read it).
    expect(inv.links).toHaveLength(56);
    expect(inv.$unknown).toBeUndefined();
  });

  it('carries the links in a Register too, beside its other fields', () => {
    const inv = box(4);
    const node = describeNode({ nodeId: 'n', hostname: 'h', mgmtAddr: '10.0.0.1', mgmtInterface: '', labels: {}, fabrics: [] }, '1.0.0');
    const bytes = toBinary(AgentMessageSchema, create(AgentMessageSchema, { msg: { case: 'register', value: buildRegister(node, wireInventory(inv), []) } }));
    const m = fromBinary(AgentMessageSchema, bytes);
    if (m.msg.case !== 'register') throw new Error('not a register');
    expect(m.msg.value.inventory?.links).toEqual(sent(inv).links);
    expect(m.msg.value.inventory?.gpus).toHaveLength(4);
    expect(m.msg.value.nodeId).toBe('n');
  });

  it('encodes a list once: the same list gives the same bytes object, another list its own encoding', () => {
    const a = box(4);
    const first = wireInventory(a).$unknown?.[0]?.data;
    // Another inventory object with the same list (the next Inventory of an unchanged node).
    expect(wireInventory({ ...a, warnings: [] }).$unknown?.[0]?.data).toBe(first);
    // A different topology, even of the same length, is not served the old bytes.
    const pcie = box(4, 'PIX');
    expect(pcie.links).toHaveLength(a.links.length);
    expect(sent(wireInventory(pcie)).links.map((l) => l.connection)).toEqual(pcie.links.map(() => 'PIX'));
    expect(sent(wireInventory(a)).links.map((l) => l.connection)).toEqual(a.links.map(() => 'NV18'));
  });

  it('leaves an inventory without links as it is, and keeps unknown fields it already had', () => {
    const none = create(InventorySchema, { hostname: 'x' });
    expect(wireInventory(none)).toBe(none);
    const inv = box(2);
    inv.$unknown = [{ no: 99, wireType: 0, data: new Uint8Array([7]) }];
    const wire = wireInventory(inv);
    expect(wire.$unknown?.map((u) => u.no)).toEqual([99, 2]);
    expect(sent(wire).links).toEqual(sent({ ...inv, $unknown: undefined }).links);
  });
});

describe('sameLinks', () => {
  it('is true for equal lists that are different objects, false for any difference', () => {
    const a = box(3).links;
    expect(sameLinks(a, box(3).links)).toBe(true);
    expect(sameLinks(a, a)).toBe(true);
    expect(sameLinks(a, box(3, 'PIX').links)).toBe(false);
    expect(sameLinks(a, a.slice(1))).toBe(false);
    const swapped = [...a];
    [swapped[0], swapped[1]] = [swapped[1] as (typeof a)[0], swapped[0] as (typeof a)[0]];
    expect(sameLinks(a, swapped)).toBe(false);
    const fewerNvlinks = box(3).links.map((l, i) => (i === 2 ? { ...l, nvlinks: 4 } : l));
    expect(sameLinks(a, fewerNvlinks)).toBe(false);
  });
});
