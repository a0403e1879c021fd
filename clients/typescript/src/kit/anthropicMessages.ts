/**
 * Anthropic Messages to a `ModelOutput`, as the Python kit's `anthropic_messages`: `thinking` is
 * a reasoning block with its `signature`, `redacted_thinking` a redacted reasoning block with its
 * opaque `data` and the route's `provider` (no other provider can read it), `text` a text block, `tool_use` a tool call whose
 * arguments are `JSON.stringify(input)` (the Python kit writes the same text); other blocks are
 * refused by name. A streamed message is the SDK's `stream.finalMessage()`.
 *
 * Usage: `cacheReadTokens` is `cache_read_input_tokens`, `cacheWriteTokens`
 * `cache_creation_input_tokens` (Anthropic reports them apart from `input_tokens`).
 */
import type { Message, Usage as AnthropicUsage } from "@anthropic-ai/sdk/resources/messages";

import type { Usage } from "../gen/promptadmission/v1/session_pb.js";
import {
  modelOutputOf,
  reasoningBlock,
  redactedReasoningBlock,
  textBlock,
  toolCallBlock,
  unsupported,
  usageOf,
} from "./outputs.js";
import type { Block, ModelOutput } from "./outputs.js";

export function fromMessage(message: Message, provider = "anthropic"): ModelOutput {
  const blocks: Block[] = message.content.map((block, index) => {
    if (block.type === "text") {
      return textBlock(block.text);
    }
    if (block.type === "thinking") {
      return reasoningBlock(block.thinking, block.signature);
    }
    if (block.type === "redacted_thinking") {
      return redactedReasoningBlock(provider, block.data);
    }
    if (block.type === "tool_use") {
      return toolCallBlock(block.id, block.name, JSON.stringify(block.input));
    }
    throw unsupported(`content[${index}]`, block.type);
  });
  return modelOutputOf(blocks, anthropicUsage(message.usage));
}

export function anthropicUsage(usage: AnthropicUsage): Usage {
  return usageOf(
    usage.input_tokens,
    usage.output_tokens,
    usage.cache_read_input_tokens ?? 0,
    usage.cache_creation_input_tokens ?? 0,
  );
}
