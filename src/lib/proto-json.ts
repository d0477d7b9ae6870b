import { type DescMessage, type MessageShape, type JsonValue, toJson } from '@bufbuild/protobuf';

/**
 * Renders a message as proto JSON the way every `--json` output does: field
 * names in lowerCamelCase, implicit defaults emitted (a 0 or false a script
 * tests for must be there), enum values as their names.
 */
export function toProtoJson<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): JsonValue {
  return toJson(schema, message, { alwaysEmitImplicit: true, enumAsInteger: false });
}
