/**
 * The harness kit (`@promptadmission/client/kit`): a tool-using harness's step through the
 * service in a few lines, with the same semantics (and bytes) as the Python kit
 * (`promptadmission.kit`).
 *
 * - `HarnessSession`: `admit` returns the provider body to post, `observe` keeps the provider's
 *   response as the next Admit's `previousOutput`, `toolResult` adds a tool's result, `close`
 *   records the last output.
 * - `modelOutput`: an OpenAI `ChatCompletion` (DeepSeek's included), an OpenAI `Response` or an
 *   Anthropic `Message` as the service's assistant `Message` and `Usage`.
 *
 * The kit only reads the SDKs' objects: `openai` and `@anthropic-ai/sdk` are optional peer
 * dependencies, needed (for their types) only by a harness that uses that provider.
 */
export { HeldRequest, type Body } from "./bodies.js";
export { fromMessage, anthropicUsage } from "./anthropicMessages.js";
export { modelOutput } from "./modelOutput.js";
export { fromChatCompletion, chatUsage } from "./openaiChat.js";
export { fromResponse, responsesUsage } from "./openaiResponses.js";
export type { ModelOutput } from "./outputs.js";
export { HarnessSession, tool, type AdmitOptions, type SessionOptions } from "./session.js";
export { ToolImage, toolResult } from "./toolResults.js";

import type { MessageCreateParamsNonStreaming } from "@anthropic-ai/sdk/resources/messages";
import type { ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";
import type { ResponseCreateParamsNonStreaming } from "openai/resources/responses/responses";

/** The body `admit` returns on `WIRE_FORMAT_OPENAI_CHAT`: `HarnessSession.open<ChatBody>(…)`. */
export type ChatBody = Pick<ChatCompletionCreateParamsNonStreaming, "messages" | "tools">;
/** The body on `WIRE_FORMAT_OPENAI_RESPONSES`. */
export type ResponsesBody = Pick<ResponseCreateParamsNonStreaming, "input" | "tools">;
/** The body on `WIRE_FORMAT_ANTHROPIC_MESSAGES`. */
export type AnthropicBody = Pick<MessageCreateParamsNonStreaming, "messages" | "system" | "tools">;
