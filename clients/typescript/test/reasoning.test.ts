/**
 * Reasoning that must travel back (issue 25), in TypeScript, against the official `openai` and
 * `@anthropic-ai/sdk` packages: the fixtures of tests/fixtures/reasoning (the Python suite runs
 * the same, tests/provider/test_reasoning_round_trip.py) are served by a local provider
 * stand-in; the SDK reads each response (non-streamed, or streamed and accumulated by its own
 * helpers: `finalMessage()`, `finalResponse()`, and for DeepSeek's `reasoning_content` this
 * package's `finalChatCompletionWithReasoning`, since `finalChatCompletion()` keeps only the
 * last delta); the harness records it as the next Admit's previousOutput on the real server;
 * the next derived request carries the opaque data byte for byte, and the SDK posts it to the
 * provider unchanged.
 */
import * as assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import Anthropic from "@anthropic-ai/sdk";
import type { Message as AnthropicMessage } from "@anthropic-ai/sdk/resources/messages";
import OpenAI from "openai";
import type { ChatCompletion } from "openai/resources/chat/completions";
import type { Response as OpenAIResponse } from "openai/resources/responses/responses";

import {
  ContentBlockSchema,
  MessageRole,
  MessageSchema,
  ReasoningContent,
  WireFormat,
  createAdmissionClient,
  finalChatCompletionWithReasoning,
  userMessage,
} from "../src/index.js";
import type { ContentBlock, Message } from "../src/index.js";
import { REPO_ROOT, startServer } from "./server.js";
import type { RunningServer } from "./server.js";

type Json = Record<string, any>;

interface Case {
  name: string;
  wire_format: "openai_chat" | "openai_responses" | "anthropic_messages";
  provider: string;
  request?: Json;
  response: Json;
  stream: Array<{ event?: string; data: Json | string }>;
  reasoning_content?: string;
  tool_result: { call_id: string; text: string };
}

const FIXTURES = join(REPO_ROOT, "tests/fixtures/reasoning");
const CASES: Case[] = readdirSync(FIXTURES)
  .filter((file) => file.endsWith(".json"))
  .sort()
  .map((file) => JSON.parse(readFileSync(join(FIXTURES, file), "utf8")) as Case);
const FORMATS = {
  openai_chat: WireFormat.OPENAI_CHAT,
  openai_responses: WireFormat.OPENAI_RESPONSES,
  anthropic_messages: WireFormat.ANTHROPIC_MESSAGES,
} as const;
const TOOL = {
  name: "read_file",
  description: "Read a file",
  parametersJson: '{"type":"object","properties":{"path":{"type":"string"}}}',
};

/** A provider stand-in: answers each POST with the next queued reply, records the bodies. */
class ProviderStandIn {
  readonly replies: Array<{ response: Json } | { stream: Case["stream"] }> = [];
  readonly requests: Json[] = [];
  readonly #server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      this.requests.push(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Json);
      const reply = this.replies.shift();
      assert.ok(reply, "an unexpected provider request");
      if ("stream" in reply) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.end(
          reply.stream
            .map(
              (event) =>
                (event.event ? `event: ${event.event}\n` : "") +
                `data: ${typeof event.data === "string" ? event.data : JSON.stringify(event.data)}\n\n`,
            )
            .join(""),
        );
      } else {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(reply.response));
      }
    });
  });

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
  }

  get baseUrl(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  openai(): OpenAI {
    return new OpenAI({ apiKey: "test", baseURL: `${this.baseUrl}/v1`, maxRetries: 0 });
  }

  anthropic(): Anthropic {
    return new Anthropic({ apiKey: "test", baseURL: this.baseUrl, maxRetries: 0 });
  }
}

let server: RunningServer;
let provider: ProviderStandIn;

before(async () => {
  server = await startServer();
  provider = new ProviderStandIn();
  await provider.start();
});

after(async () => {
  await provider?.stop();
  await server?.stop();
});

const GO = [{ role: "user" as const, content: "go" }];

/** The fixture's response as the SDK hands it to a harness. */
async function sdkResponse(
  kase: Case,
  mode: "response" | "stream",
): Promise<AnthropicMessage | OpenAIResponse | ChatCompletion> {
  provider.replies.push(mode === "response" ? { response: kase.response } : { stream: kase.stream });
  if (kase.wire_format === "anthropic_messages") {
    const params = { model: "m", max_tokens: 64, messages: GO };
    const messages = provider.anthropic().messages;
    return mode === "response"
      ? await messages.create(params)
      : await messages.stream(params).finalMessage();
  }
  if (kase.wire_format === "openai_responses") {
    const responses = provider.openai().responses;
    return mode === "response"
      ? await responses.create({ model: "m", input: "go" })
      : await responses.stream({ model: "m", input: "go" }).finalResponse();
  }
  const chat = provider.openai().chat.completions;
  if (mode === "response") return await chat.create({ model: "m", messages: GO });
  return (await finalChatCompletionWithReasoning(
    chat.stream({ model: "m", messages: GO }),
  )) as unknown as ChatCompletion;
}

function text(value: string, phase = ""): ContentBlock {
  return create(ContentBlockSchema, { block: { case: "text", value: { text: value, phase } } });
}

function call(callId: string, name: string, argumentsJson: string): ContentBlock {
  return create(ContentBlockSchema, {
    block: { case: "toolCall", value: { callId, name, argumentsJson } },
  });
}

/** The SDK response as the assistant message a harness records: every block, in order. */
function assistantOf(kase: Case, response: unknown): Message {
  const blocks: ContentBlock[] = [];
  if (kase.wire_format === "anthropic_messages") {
    for (const block of (response as AnthropicMessage).content) {
      if (block.type === "thinking") {
        blocks.push(
          create(ContentBlockSchema, {
            block: { case: "reasoning", value: { text: block.thinking, signature: block.signature } },
          }),
        );
      } else if (block.type === "redacted_thinking") {
        blocks.push(
          create(ContentBlockSchema, {
            block: { case: "redactedReasoning", value: { provider: "anthropic", data: block.data } },
          }),
        );
      } else if (block.type === "tool_use") {
        blocks.push(call(block.id, block.name, JSON.stringify(block.input)));
      } else if (block.type === "text") {
        blocks.push(text(block.text));
      }
    }
  } else if (kase.wire_format === "openai_responses") {
    for (const item of (response as OpenAIResponse).output) {
      if (item.type === "reasoning") {
        blocks.push(
          create(ContentBlockSchema, {
            block: {
              case: "reasoningItem",
              value: {
                id: item.id,
                encryptedContent: item.encrypted_content ?? "",
                summary: item.summary.map((part) => part.text),
                content: (item.content ?? []).map((part) => part.text),
              },
            },
          }),
        );
      } else if (item.type === "message") {
        for (const part of item.content) {
          if (part.type === "output_text") blocks.push(text(part.text, item.phase ?? ""));
        }
      } else if (item.type === "function_call") {
        blocks.push(call(item.call_id, item.name, item.arguments));
      }
    }
  } else {
    const message = (response as ChatCompletion).choices[0]!.message as ChatCompletion["choices"][number]["message"] & {
      reasoning_content?: string | null;
    };
    if (message.reasoning_content) {
      blocks.push(
        create(ContentBlockSchema, {
          block: { case: "reasoning", value: { text: message.reasoning_content } },
        }),
      );
    }
    if (message.content) blocks.push(text(message.content));
    for (const toolCall of message.tool_calls ?? []) {
      if (toolCall.type === "function") {
        blocks.push(call(toolCall.id, toolCall.function.name, toolCall.function.arguments));
      }
    }
  }
  return create(MessageSchema, { role: MessageRole.ASSISTANT, content: blocks });
}

/** What the next request must carry, exactly, from the fixture's provider response. */
function expectedReasoning(kase: Case): unknown[] {
  if (kase.wire_format === "anthropic_messages") {
    return (kase.response.content as Json[]).filter((b) =>
      ["thinking", "redacted_thinking"].includes(b.type),
    );
  }
  if (kase.wire_format === "openai_responses") {
    return (kase.response.output as Json[])
      .filter((item) => item.type === "reasoning")
      .map((item) => ({
        type: item.type,
        id: item.id,
        summary: item.summary,
        encrypted_content: item.encrypted_content,
      }));
  }
  return [kase.reasoning_content];
}

function carriedReasoning(kase: Case, body: Json): unknown[] {
  if (kase.wire_format === "openai_responses") {
    return (body.input as Json[]).filter((item) => item.type === "reasoning");
  }
  const assistants = (body.messages as Json[]).filter((m) => m.role === "assistant");
  assert.equal(assistants.length, 1);
  if (kase.wire_format === "openai_chat") return [assistants[0]!.reasoning_content];
  return (assistants[0]!.content as Json[]).filter((b) =>
    ["thinking", "redacted_thinking"].includes(b.type),
  );
}

/** The next request posted by the SDK: the JSON the provider receives. */
async function postThroughSdk(kase: Case, body: Json): Promise<Json> {
  provider.replies.push({ response: kase.response });
  if (kase.wire_format === "anthropic_messages") {
    await provider.anthropic().messages.create({ model: "m", max_tokens: 64, ...body } as never);
  } else if (kase.wire_format === "openai_responses") {
    await provider.openai().responses.create({ model: "m", ...kase.request, ...body } as never);
  } else {
    await provider.openai().chat.completions.create({ model: "m", ...body } as never);
  }
  return provider.requests.at(-1)!;
}

for (const kase of CASES) {
  for (const mode of ["response", "stream"] as const) {
    test(`${kase.name} (${mode}) round-trips into the next request byte for byte`, async () => {
      const client = createAdmissionClient({ baseUrl: server.baseUrl });
      const sessionId = `ts-reasoning-${randomUUID()}`;
      await client.createSession({ sessionId });
      const common = {
        sessionId,
        turn: 1n,
        renderedPrompt: "Be brief.",
        route: { provider: kase.provider, model: "reasoning-model", contextWindow: 200_000n },
        tools: [TOOL],
        wireFormat: FORMATS[kase.wire_format],
      };
      const first = await client.admit({ ...common, step: 1n, users: [userMessage("a.py?")] });
      const response = await sdkResponse(kase, mode);
      const second = await client.admit({
        ...common,
        step: 2n,
        previousOutput: {
          admissionId: first.admissionId,
          assistant: assistantOf(kase, response),
          toolResults: [
            { callId: kase.tool_result.call_id, content: [text(kase.tool_result.text)] },
          ],
        },
      });
      const body = JSON.parse(second.request!.bodyJson) as Json;
      assert.deepEqual(carriedReasoning(kase, body), expectedReasoning(kase));
      assert.deepEqual(second.request!.omitted, []);
      const received = await postThroughSdk(kase, body);
      assert.deepEqual(carriedReasoning(kase, received), expectedReasoning(kase));
      for (const key of Object.keys(body)) assert.deepEqual(received[key], body[key]);
    });
  }
}

test("finalChatCompletion() keeps only the last reasoning_content delta; the accumulator keeps all", async () => {
  const kase = CASES.find((c) => c.name === "deepseek-chat-stream-reasoning-tool-call")!;
  provider.replies.push({ stream: kase.stream }, { stream: kase.stream });
  const chat = provider.openai().chat.completions;
  const plain = (await chat.stream({ model: "m", messages: GO }).finalChatCompletion()).choices[0]!
    .message as unknown as Json;
  assert.equal(plain.reasoning_content, null); // what openai-node gives a harness
  const kept = await finalChatCompletionWithReasoning(chat.stream({ model: "m", messages: GO }));
  assert.equal(kept.choices[0]!.message.reasoning_content, kase.reasoning_content);
  assert.equal(kept.choices[0]!.message.tool_calls?.[0]?.id, "call_ds1");
});

test("ReasoningContent concatenates per choice and leaves the completion it is given alone", () => {
  const reasoning = new ReasoningContent();
  reasoning.add({ choices: [{ index: 0, delta: { reasoning_content: "a" } }] });
  reasoning.add({ choices: [{ index: 1, delta: { reasoning_content: "x" } }, { index: 0, delta: null }] });
  reasoning.add({ choices: [{ index: 0, delta: { reasoning_content: null } }] });
  reasoning.add({ choices: [{ index: 0, delta: { reasoning_content: "b" } }] });
  reasoning.add({ choices: [] });
  assert.equal(reasoning.of(0), "ab");
  assert.equal(reasoning.of(1), "x");
  assert.equal(reasoning.of(2), undefined);
  const completion = {
    id: "c",
    choices: [
      { index: 0, message: { role: "assistant", reasoning_content: null } },
      { index: 2, message: { role: "assistant" } },
    ],
  };
  const applied = reasoning.applyTo(completion);
  assert.equal(applied.choices[0]!.message.reasoning_content, "ab");
  assert.deepEqual(applied.choices[1]!.message, { role: "assistant" });
  assert.equal(completion.choices[0]!.message.reasoning_content, null);
  assert.equal(applied.id, "c");
});
