/**
 * What a provider's response becomes: the assistant `Message` and the `Usage` to record (the
 * Python kit's `promptadmission.kit.outputs`, with the same semantics and bytes).
 */
import { create } from "@bufbuild/protobuf";

import {
  MessageRole,
  MessageSchema,
  ReasoningBlockSchema,
  ReasoningItemBlockSchema,
  RedactedReasoningBlockSchema,
  TextBlockSchema,
  ToolCallBlockSchema,
  UsageSchema,
} from "../gen/promptadmission/v1/session_pb.js";
import type { ContentBlock, Message, ToolCallBlock, Usage } from "../gen/promptadmission/v1/session_pb.js";

/** One model response as the service records it. */
export interface ModelOutput {
  /** The response's content in the provider's order: reasoning, text and tool calls. */
  assistant: Message;
  /** The provider's token counts, cache reads and writes included; undefined when none. */
  usage: Usage | undefined;
  /** The tool calls the model made, in order: each needs a result before the next step. */
  toolCalls: ToolCallBlock[];
  /** The response's text blocks joined: the answer a harness shows. */
  text: string;
}

export type Block = ContentBlock["block"];

export function modelOutputOf(blocks: Block[], usage: Usage | undefined): ModelOutput {
  const assistant = create(MessageSchema, {
    role: MessageRole.ASSISTANT,
    content: blocks.map((block) => ({ block })),
  });
  const toolCalls = blocks.flatMap((block) => (block.case === "toolCall" ? [block.value] : []));
  const text = blocks.map((block) => (block.case === "text" ? block.value.text : "")).join("");
  return { assistant, usage, toolCalls, text };
}

export function textBlock(text: string, phase = ""): Block {
  return { case: "text", value: create(TextBlockSchema, { text, phase }) };
}

export function redactedReasoningBlock(provider: string, data: string): Block {
  return { case: "redactedReasoning", value: create(RedactedReasoningBlockSchema, { provider, data }) };
}

export function reasoningItemBlock(id: string, encryptedContent: string, summary: string[], content: string[]): Block {
  return {
    case: "reasoningItem",
    value: create(ReasoningItemBlockSchema, { id, encryptedContent, summary, content }),
  };
}

export function reasoningBlock(text: string, signature = ""): Block {
  return { case: "reasoning", value: create(ReasoningBlockSchema, { text, signature }) };
}

export function toolCallBlock(callId: string, name: string, argumentsJson: string): Block {
  return { case: "toolCall", value: create(ToolCallBlockSchema, { callId, name, argumentsJson }) };
}

export function usageOf(input: number, output: number, cacheRead: number, cacheWrite: number): Usage {
  return create(UsageSchema, {
    inputTokens: BigInt(input),
    outputTokens: BigInt(output),
    cacheReadTokens: BigInt(cacheRead),
    cacheWriteTokens: BigInt(cacheWrite),
  });
}

/** The error for content the service has no block for: refused by name, never dropped. */
export function unsupported(where: string, kind: string): Error {
  return new RangeError(`${where}: the service has no block for '${kind}' content`);
}
