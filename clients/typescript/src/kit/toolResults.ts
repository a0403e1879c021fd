/**
 * Tool results from a harness's own values, as the Python kit's `tool_results`:
 *
 * - a string is one text block, as it is;
 * - a `ToolImage` is one image block (`ToolImage.ofBytes` makes a base64 `data:` URI);
 * - an array of strings and `ToolImage`s with at least one image is one block each;
 * - an `Error` is an error result whose text is `"<name>: <message>"`;
 * - anything else is JSON, one text block: `JSON.stringify(value)`.
 *
 * `{ isError: true }` marks any value as a failure description.
 */
import { create } from "@bufbuild/protobuf";

import { ToolResultSchema } from "../gen/promptadmission/v1/session_pb.js";
import type { ToolCallBlock, ToolResult } from "../gen/promptadmission/v1/session_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";

/** An image a tool returned: a URL or a `data:` URI, with its media type. */
export class ToolImage {
  constructor(
    readonly uri: string,
    readonly mediaType = "",
  ) {}

  static ofBytes(data: Uint8Array, mediaType: string): ToolImage {
    return new ToolImage(`data:${mediaType};base64,${Buffer.from(data).toString("base64")}`, mediaType);
  }
}

type BlockInit = MessageInitShape<typeof ToolResultSchema>["content"] extends (infer B)[] | undefined
  ? B
  : never;

export function toolResult(
  call: ToolCallBlock | string,
  value: unknown,
  options: { isError?: boolean } = {},
): ToolResult {
  const callId = typeof call === "string" ? call : call.callId;
  if (value instanceof Error) {
    const text = value.message ? `${value.name}: ${value.message}` : value.name;
    return create(ToolResultSchema, { callId, content: [textInit(text)], isError: true });
  }
  return create(ToolResultSchema, { callId, content: blocks(value), isError: options.isError ?? false });
}

function blocks(value: unknown): BlockInit[] {
  if (typeof value === "string") {
    return [textInit(value)];
  }
  if (value instanceof ToolImage) {
    return [imageInit(value)];
  }
  if (isParts(value)) {
    return value.map((part) => (part instanceof ToolImage ? imageInit(part) : textInit(part)));
  }
  const text = JSON.stringify(value, finiteNumbers);
  if (text === undefined) {
    throw new TypeError(`a ${typeof value} is not a JSON value`);
  }
  return [textInit(text)];
}

/** NaN and the infinities are refused, as in Python: `JSON.stringify` would write `null`. */
function finiteNumbers(_key: string, item: unknown): unknown {
  if (typeof item === "number" && !Number.isFinite(item)) {
    throw new RangeError(`${item} is not a JSON number`);
  }
  return item;
}

function isParts(value: unknown): value is (string | ToolImage)[] {
  return (
    Array.isArray(value) &&
    value.every((part) => typeof part === "string" || part instanceof ToolImage) &&
    value.some((part) => part instanceof ToolImage)
  );
}

function textInit(text: string): BlockInit {
  return { block: { case: "text", value: { text } } };
}

function imageInit(image: ToolImage): BlockInit {
  return { block: { case: "image", value: { uri: image.uri, mediaType: image.mediaType } } };
}
