/**
 * A line-oriented driver of `admitStreamed` for responses of any size, for
 * tests/clients/test_large_sessions.py and tests/compose: `node dist/test/largeDriver.js
 * <baseUrl>` reads one JSON object per stdin line,
 *
 *     {"request": <proto JSON of an AdmitRequest>, "derivedOut": "<file>",
 *      "bodyOut": "<file>", "extra": {"model": "m"}, "keys": ["messages", "model", "tools"],
 *      "post": {"baseUrl": "http://127.0.0.1:PORT", "wire": "openai_chat"}}
 *
 * admits it through StreamAdmit (the client at a 4 MiB read limit, gRPC's default), writes the
 * binary `DerivedRequest` to `derivedOut` and, for a provider format, the body the kit rebuilds
 * (`HeldRequest`, merged with `extra`) as `JSON.stringify` writes it with its top-level keys in
 * the order of `keys` to `bodyOut`, then posts that body with the official SDK (`openai`,
 * `@anthropic-ai/sdk`) to `post.baseUrl` when given. It answers one line per request:
 * `{"ok": true, "admitMs": …, "responseBytes": …, "bodyBytes": …, "postMs": …}` or
 * `{"ok": false, "error": "…"}`. Large contents travel through files, not the pipe.
 */
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";

import Anthropic from "@anthropic-ai/sdk";
import { fromJson, toBinary } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import OpenAI from "openai";

import {
  AdmitRequestSchema,
  AdmitResponseSchema,
  DerivedRequestSchema,
  WireFormat,
  admitStreamed,
  createAdmissionClient,
} from "../src/index.js";
import { HeldRequest } from "../src/kit/index.js";

const MIB = 1 << 20;

interface Command {
  request: JsonValue;
  derivedOut: string;
  bodyOut?: string;
  extra?: Record<string, unknown>;
  keys?: string[];
  post?: { baseUrl: string; wire: "openai_chat" | "openai_responses" | "anthropic_messages" };
}

/** `body` with its top-level keys in the order of `keys`, which must be exactly its keys. */
function ordered(
  body: Record<string, unknown>,
  keys: string[] | undefined,
): Record<string, unknown> {
  if (keys === undefined) {
    return body;
  }
  const have = Object.keys(body).sort().join(",");
  const want = [...keys].sort().join(",");
  if (have !== want) {
    throw new Error(`the body's keys are ${have}, not ${want}`);
  }
  return Object.fromEntries(keys.map((key) => [key, body[key]]));
}

async function post(
  target: NonNullable<Command["post"]>,
  body: Record<string, unknown>,
): Promise<void> {
  // The SDKs' parameter types are what the service's bodies are checked against elsewhere
  // (tests/provider); here the body goes through each SDK's create as a harness passes it.
  if (target.wire === "anthropic_messages") {
    const client = new Anthropic({ apiKey: "test", baseURL: target.baseUrl, maxRetries: 0 });
    await client.messages.create(body as unknown as Anthropic.MessageCreateParamsNonStreaming);
    return;
  }
  const client = new OpenAI({ apiKey: "test", baseURL: `${target.baseUrl}/v1`, maxRetries: 0 });
  if (target.wire === "openai_chat") {
    await client.chat.completions.create(
      body as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming,
    );
  } else {
    await client.responses.create(
      body as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming,
    );
  }
}

async function main(): Promise<void> {
  const baseUrl = process.argv[2];
  if (baseUrl === undefined) {
    throw new Error("usage: largeDriver.js <baseUrl>");
  }
  const client = createAdmissionClient({
    baseUrl,
    token: process.env["PAS_TOKEN"],
    readMaxBytes: 4 * MIB,
  });
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") {
      continue;
    }
    const command = JSON.parse(line) as Command;
    let answer: Record<string, unknown>;
    try {
      const request = fromJson(AdmitRequestSchema, command.request);
      const started = performance.now();
      const response = await admitStreamed(client, request, { timeoutMs: 300_000 });
      const admitMs = performance.now() - started;
      const derived = response.request;
      if (derived === undefined) {
        throw new Error("the response carries no derived request");
      }
      writeFileSync(command.derivedOut, toBinary(DerivedRequestSchema, derived));
      answer = {
        ok: true,
        admitMs,
        responseBytes: toBinary(AdmitResponseSchema, response).length,
        totalMessages: Number(derived.totalMessages),
        totalTokens: Number(response.forecast?.totalTokens ?? 0),
      };
      if (command.bodyOut !== undefined) {
        if (derived.wireFormat === WireFormat.NEUTRAL) {
          throw new Error("bodyOut: a NEUTRAL request has no provider body");
        }
        const body = ordered(
          { ...command.extra, ...HeldRequest.of(derived, undefined).body },
          command.keys,
        );
        const bytes = Buffer.from(JSON.stringify(body), "utf8");
        writeFileSync(command.bodyOut, bytes);
        answer["bodyBytes"] = bytes.length;
        if (command.post !== undefined) {
          const posting = performance.now();
          await post(command.post, body);
          answer["postMs"] = performance.now() - posting;
        }
      }
    } catch (err) {
      answer = { ok: false, error: String(err instanceof Error ? (err.stack ?? err) : err) };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
