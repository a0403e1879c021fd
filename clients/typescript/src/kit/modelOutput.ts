/**
 * `modelOutput(response)`: the `ModelOutput` of an OpenAI `ChatCompletion` (DeepSeek's
 * included), an OpenAI `Response` or an Anthropic `Message`, streamed ones too (the SDK's final
 * object), picked by the response's own type field, as the Python kit's `model_output`.
 * `provider` is the route's provider of a Messages API response (Anthropic's own, or DeepSeek's
 * Anthropic-compatible API): its opaque reasoning goes back only to it.
 */
import type { Message } from "@anthropic-ai/sdk/resources/messages";
import type { ChatCompletion } from "openai/resources/chat/completions";
import type { Response } from "openai/resources/responses/responses";

import { fromMessage } from "./anthropicMessages.js";
import { fromChatCompletion } from "./openaiChat.js";
import { fromResponse } from "./openaiResponses.js";
import type { ModelOutput } from "./outputs.js";

export function modelOutput(response: unknown, provider = "anthropic"): ModelOutput {
  const tagged = response as { object?: unknown; type?: unknown };
  if (tagged.object === "chat.completion") {
    return fromChatCompletion(response as ChatCompletion);
  }
  if (tagged.object === "response") {
    return fromResponse(response as Response);
  }
  if (tagged.type === "message") {
    return fromMessage(response as Message, provider);
  }
  throw new TypeError("not a provider response the kit knows");
}
