/**
 * OpenAI Chat Completions (and DeepSeek's chat API) to a `ModelOutput`, as the Python kit's
 * `openai_chat`: from `choices[0].message`, DeepSeek's `reasoning_content` first, then the text
 * (`content`, or the `refusal`), then the function tool calls with their ids and argument JSON
 * byte for byte. A streamed completion is the SDK's `stream.finalChatCompletion()`, read through
 * `finalChatCompletionWithReasoning(stream)` for DeepSeek (openai-node keeps only the last
 * `reasoning_content` delta).
 *
 * Usage: `inputTokens` is `prompt_tokens`; `cacheReadTokens` OpenAI's
 * `prompt_tokens_details.cached_tokens` or DeepSeek's `prompt_cache_hit_tokens`;
 * `cacheWriteTokens` OpenAI's `prompt_tokens_details.cache_write_tokens` when reported.
 */
import type { ChatCompletion } from "openai/resources/chat/completions";
import type { CompletionUsage } from "openai/resources/completions";

import type { Usage } from "../gen/promptadmission/v1/session_pb.js";
import { modelOutputOf, reasoningBlock, textBlock, toolCallBlock, unsupported, usageOf } from "./outputs.js";
import type { Block, ModelOutput } from "./outputs.js";

export function fromChatCompletion(completion: ChatCompletion): ModelOutput {
  const choice = completion.choices[0];
  if (choice === undefined) {
    throw new RangeError("choices: the completion has no choice");
  }
  const message = choice.message;
  const blocks: Block[] = [];
  const reasoning = (message as { reasoning_content?: unknown }).reasoning_content;
  if (typeof reasoning === "string" && reasoning !== "") {
    blocks.push(reasoningBlock(reasoning));
  }
  const content = message.content ?? message.refusal;
  if (content) {
    blocks.push(textBlock(content));
  }
  (message.tool_calls ?? []).forEach((call, index) => {
    if (call.type !== "function") {
      throw unsupported(`choices[0].message.tool_calls[${index}]`, call.type);
    }
    blocks.push(toolCallBlock(call.id, call.function.name, call.function.arguments));
  });
  return modelOutputOf(blocks, chatUsage(completion.usage));
}

export function chatUsage(usage: CompletionUsage | undefined): Usage | undefined {
  if (usage === undefined || usage === null) {
    return undefined;
  }
  const details = usage.prompt_tokens_details;
  const hit = (usage as { prompt_cache_hit_tokens?: unknown }).prompt_cache_hit_tokens; // DeepSeek
  const cached = details?.cached_tokens ?? (typeof hit === "number" ? hit : 0);
  return usageOf(usage.prompt_tokens, usage.completion_tokens, cached, details?.cache_write_tokens ?? 0);
}
