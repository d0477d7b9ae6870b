import { create, toBinary } from '@bufbuild/protobuf';
import { WireType } from '@bufbuild/protobuf/wire';
import { type GpuLink, type Inventory, InventorySchema } from '../../gen/llmgw/v1/agent_pb.js';

/** Inventory.links' field number (proto/llmgw/v1/agent.proto). */
const LINKS_FIELD = 2;

/**
 * Each links list's encoding, by the list itself: the inventory watcher keeps
 * one list for as long as the topology stays the same (sameLinks), so a
 * node's list is encoded once per topology change.
 */
const encoded = new WeakMap<readonly GpuLink[], Uint8Array>();

/**
 * The Inventory as the stream carries it (Register and Inventory messages):
 * the same message, with its links written from their encoding kept since
 * the topology last changed instead of encoded again each time.
 *
 * `nvidia-smi topo -m` gives one link per pair of GPUs and HCAs: 4,032 for
 * 64 GPUs, which protobuf-es encodes by reflection, field by field, in the
 * agent's interpreter-only V8 (--no-opt, bin/run.js): 100-450 ms a message
 * on a loaded 2-core host (bench figure 16), and every READY sent one or two
 * Inventories (its time and GPU memory learnt, warmth-ledger.ts). That held
 * the event loop while the next engines' answers waited for their READY.
 *
 * The links go out as an unknown field of the message: protobuf-es writes
 * a message's unknown fields verbatim after its known ones, and a repeated
 * field's elements may come anywhere in the message in their order (the
 * protobuf encoding's rule for repeated fields), so what is sent decodes to
 * the same Inventory, links in the same order. The object returned is for
 * the wire only: its own `links` is empty.
 */
export function wireInventory(inventory: Inventory): Inventory {
  if (inventory.links.length === 0) return inventory;
  let data = encoded.get(inventory.links);
  if (data === undefined) {
    data = linksEncoding(inventory.links);
    encoded.set(inventory.links, data);
  }
  return { ...inventory, links: [], $unknown: [...(inventory.$unknown ?? []), { no: LINKS_FIELD, wireType: WireType.LengthDelimited, data }] };
}

/**
 * The links as protobuf-es writes them in an Inventory, less the first
 * element's tag, which the writer puts before an unknown field's data:
 * tag(2, LEN) + data is then byte for byte the list's own encoding.
 */
function linksEncoding(links: readonly GpuLink[]): Uint8Array {
  const bytes = toBinary(InventorySchema, create(InventorySchema, { links: [...links] }));
  // The tag of field 2, wire type 2: one byte, 0x12.
  if (bytes[0] !== ((LINKS_FIELD << 3) | WireType.LengthDelimited)) throw new Error('links encoding does not start with their tag');
  return bytes.subarray(1);
}

/** Whether two links lists say the same (the watcher then keeps the old one, and with it its encoding). */
export function sameLinks(a: readonly GpuLink[], b: readonly GpuLink[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as GpuLink;
    const y = b[i] as GpuLink;
    if (x.a !== y.a || x.b !== y.b || x.connection !== y.connection || x.nvlinks !== y.nvlinks || x.$unknown !== undefined || y.$unknown !== undefined) return false;
  }
  return true;
}
