/**
 * OpenAI Responses to a `ModelOutput`, as the Python kit's `openai_responses`: the `output`
 * items in order — a message's `output_text` and `refusal` parts are text blocks carrying the
 * message's `phase`, a `function_call` a tool call (its `call_id`), a `reasoning` item a
 * reasoning item block (`id`, `encrypted_content`, summary and reasoning texts, byte for byte);
 * other items are refused by name. A streamed response is the SDK's
 * `stream.finalResponse()`.
 */
import type { Response, ResponseReasoningItem, ResponseUsage } from "openai/resources/responses/responses";

import type { Usage } from "../gen/promptadmission/v1/session_pb.js";
import { modelOutputOf, reasoningItemBlock, textBlock, toolCallBlock, unsupported, usageOf } from "./outputs.js";
import type { Block, ModelOutput } from "./outputs.js";

export function fromResponse(response: Response): ModelOutput {
  const blocks: Block[] = [];
  response.output.forEach((item, index) => {
    if (item.type === "message") {
      const phase = item.phase ?? "";
      for (const part of item.content) {
        blocks.push(textBlock(part.type === "output_text" ? part.text : part.refusal, phase));
      }
    } else if (item.type === "function_call") {
      blocks.push(toolCallBlock(item.call_id, item.name, item.arguments));
    } else if (item.type === "reasoning") {
      blocks.push(reasoningItem(item));
    } else {
      throw unsupported(`output[${index}]`, item.type);
    }
  });
  return modelOutputOf(blocks, responsesUsage(response.usage));
}

function reasoningItem(item: ResponseReasoningItem): Block {
  return reasoningItemBlock(
    item.id,
    item.encrypted_content ?? "",
    item.summary.map((summary) => summary.text),
    (item.content ?? []).map((part) => part.text),
  );
}

export function responsesUsage(usage: ResponseUsage | undefined): Usage | undefined {
  if (usage === undefined || usage === null) {
    return undefined;
  }
  const details = usage.input_tokens_details;
  return usageOf(usage.input_tokens, usage.output_tokens, details.cached_tokens, details.cache_write_tokens);
}
