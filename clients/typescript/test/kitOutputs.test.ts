/**
 * The kit's converters on the shared fixtures (tests/fixtures/harness, written by
 * tests/harness_fixtures.py): each provider response, read by the official SDK from a local
 * stand-in (`create()` for a JSON body; `stream()` and its accumulator for recorded events),
 * with the fixture's tool results made from harness values, must give the fixture's StepOutput
 * bytes — the bytes the Python kit gives (tests/clients/test_harness_outputs.py).
 */
import * as assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import { create, fromJson, toBinary } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import OpenAI from "openai";

import { StepOutputSchema, finalChatCompletionWithReasoning } from "../src/index.js";
import { ToolImage, modelOutput, toolResult } from "../src/kit/index.js";
import { startProviderServer } from "./providerServer.js";
import type { Json, ProviderServer, SseEvent } from "./providerServer.js";
import { REPO_ROOT } from "./server.js";

interface ToolEntry {
  call_id: string;
  is_error?: boolean;
  text?: string;
  json?: JsonValue;
  image?: { uri: string; media_type: string };
  parts?: { text?: string; image?: { uri: string; media_type: string } }[];
  error?: { name: string; message: string };
}

export interface HarnessCase {
  name: string;
  wire_format: "openai_chat" | "openai_responses" | "anthropic_messages";
  provider: string;
  response?: Json;
  stream?: SseEvent[];
  tool_results: ToolEntry[];
  step_output: JsonValue;
  step_output_base64: string;
}

const DIRECTORY = join(REPO_ROOT, "tests/fixtures/harness");
export const CASES: HarnessCase[] = readdirSync(DIRECTORY)
  .filter((name) => name.endsWith(".json"))
  .sort()
  .map((name) => JSON.parse(readFileSync(join(DIRECTORY, name), "utf8")) as HarnessCase);

let server: ProviderServer;
before(async () => {
  server = await startProviderServer();
});
after(async () => {
  await server?.close();
});

function harnessValue(entry: ToolEntry): unknown {
  if (entry.text !== undefined) {
    return entry.text;
  }
  if (entry.json !== undefined) {
    return entry.json;
  }
  if (entry.image !== undefined) {
    return new ToolImage(entry.image.uri, entry.image.media_type);
  }
  if (entry.parts !== undefined) {
    return entry.parts.map((part) =>
      part.image === undefined ? (part.text ?? "") : new ToolImage(part.image.uri, part.image.media_type),
    );
  }
  const error = new Error(entry.error?.message);
  error.name = entry.error?.name ?? "Error";
  return error;
}

/** The fixture's response as the SDK hands it to a harness. */
export async function sdkResponse(fixture: HarnessCase, provider: ProviderServer): Promise<unknown> {
  const openai = new OpenAI({ apiKey: "test", baseURL: `${provider.baseUrl}/v1`, maxRetries: 0 });
  const anthropic = new Anthropic({ apiKey: "test", baseURL: provider.baseUrl, maxRetries: 0 });
  const messages = [{ role: "user" as const, content: "go" }];
  provider.answer(fixture.response !== undefined ? { response: fixture.response } : { stream: fixture.stream ?? [] });
  if (fixture.wire_format === "openai_chat") {
    return fixture.response !== undefined
      ? openai.chat.completions.create({ model: "m", messages })
      : // openai-node's finalChatCompletion() keeps only the last reasoning_content delta
        finalChatCompletionWithReasoning(openai.chat.completions.stream({ model: "m", messages }));
  }
  if (fixture.wire_format === "openai_responses") {
    return fixture.response !== undefined
      ? openai.responses.create({ model: "m", input: "go" })
      : openai.responses.stream({ model: "m", input: "go" }).finalResponse();
  }
  return fixture.response !== undefined
    ? anthropic.messages.create({ model: "m", max_tokens: 64, messages })
    : anthropic.messages.stream({ model: "m", max_tokens: 64, messages }).finalMessage();
}

for (const fixture of CASES) {
  test(`${fixture.name}: the SDK's response gives the fixture's StepOutput bytes`, async () => {
    const output = modelOutput(await sdkResponse(fixture, server));
    const step = create(StepOutputSchema, {
      admissionId: "adm-fixture",
      assistant: output.assistant,
      toolResults: fixture.tool_results.map((entry) =>
        toolResult(entry.call_id, harnessValue(entry), { isError: entry.is_error ?? false }),
      ),
      usage: output.usage,
    });
    const expected = fromJson(StepOutputSchema, fixture.step_output);
    assert.deepEqual(step, expected);
    assert.deepEqual(Buffer.from(toBinary(StepOutputSchema, step)).toString("base64"), fixture.step_output_base64);
  });
}

test("the fixtures are there", () => {
  assert.ok(CASES.length >= 9);
});
