/**
 * Property tests of the kit's converters with fast-check, on responses typed by the official
 * SDKs (`ChatCompletion`, `Response`, `Message`): every id, name, argument text, signature and
 * reasoning text survives in order, the usage maps as documented, and a JSON tool value is its
 * `JSON.stringify` text. tests/clients/test_harness_cross_language.py checks the same random
 * responses give the Python kit's bytes.
 */
import * as assert from "node:assert/strict";
import { test } from "node:test";

import type { Message } from "@anthropic-ai/sdk/resources/messages";
import fc from "fast-check";
import type { ChatCompletion } from "openai/resources/chat/completions";
import type { Response } from "openai/resources/responses/responses";

import type { Message as PasMessage } from "../src/index.js";
import { modelOutput, toolResult } from "../src/kit/index.js";

const text = fc.string({ unit: "grapheme", maxLength: 40 });
const word = fc.stringMatching(/^[a-z0-9_-]{1,20}$/);
const count = fc.nat({ max: 2 ** 31 });
// Tool-call arguments travel as JSON text, so draw only values that survive it: -0 becomes 0.
const jsonObject = fc
  .dictionary(text, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5, noNullPrototype: true })
  .map((value) => JSON.parse(JSON.stringify(value)) as Record<string, unknown>);

function kinds(message: PasMessage): unknown[][] {
  return message.content.map(({ block }) => {
    if (block.case === "text") {
      return block.value.phase ? ["text", block.value.text, block.value.phase] : ["text", block.value.text];
    }
    if (block.case === "redactedReasoning") {
      return ["redacted", block.value.provider, block.value.data];
    }
    if (block.case === "reasoningItem") {
      return ["reasoning_item", block.value.id, block.value.encryptedContent, block.value.summary];
    }
    if (block.case === "reasoning") {
      return ["reasoning", block.value.text, block.value.signature];
    }
    if (block.case === "toolCall") {
      return ["tool_call", block.value.callId, block.value.name, block.value.argumentsJson];
    }
    return [block.case];
  });
}

const chatCompletion = fc
  .record({
    content: fc.option(text.filter((t) => t !== ""), { nil: null }),
    reasoning: fc.option(text.filter((t) => t !== ""), { nil: undefined }),
    calls: fc.array(fc.record({ id: word, name: word, args: jsonObject }), { maxLength: 3 }),
    prompt: count,
    completion: count,
    hit: count,
    deepseek: fc.boolean(),
  })
  .map((drawn) => {
    const message: Record<string, unknown> = {
      role: "assistant",
      content: drawn.content ?? (drawn.calls.length ? null : ""),
      refusal: null,
    };
    if (drawn.calls.length) {
      message["tool_calls"] = drawn.calls.map((call, index) => ({
        id: `call_${index}_${call.id}`,
        type: "function",
        function: { name: call.name, arguments: JSON.stringify(call.args) },
      }));
    }
    if (drawn.reasoning !== undefined) {
      message["reasoning_content"] = drawn.reasoning;
    }
    const usage: Record<string, unknown> = {
      prompt_tokens: drawn.prompt,
      completion_tokens: drawn.completion,
      total_tokens: 0,
    };
    if (drawn.deepseek) {
      usage["prompt_cache_hit_tokens"] = drawn.hit;
    } else {
      usage["prompt_tokens_details"] = { cached_tokens: drawn.hit };
    }
    const completion = {
      id: "chatcmpl-p",
      object: "chat.completion",
      created: 0,
      model: "m",
      choices: [{ index: 0, message, finish_reason: "stop", logprobs: null }],
      usage,
    };
    return { completion: completion as unknown as ChatCompletion, drawn };
  });

test("a chat completion keeps reasoning, text and calls in order, and its cache reads", () => {
  fc.assert(
    fc.property(chatCompletion, ({ completion, drawn }) => {
      const output = modelOutput(completion);
      const message = completion.choices[0]!.message as ChatCompletion["choices"][0]["message"] & {
        reasoning_content?: string;
      };
      const expected: unknown[][] = [];
      if (message.reasoning_content) {
        expected.push(["reasoning", message.reasoning_content, ""]);
      }
      if (message.content) {
        expected.push(["text", message.content]);
      }
      for (const call of message.tool_calls ?? []) {
        assert.ok(call.type === "function");
        expected.push(["tool_call", call.id, call.function.name, call.function.arguments]);
      }
      assert.deepEqual(kinds(output.assistant), expected);
      assert.equal(output.usage?.inputTokens, BigInt(drawn.prompt));
      assert.equal(output.usage?.cacheReadTokens, BigInt(drawn.hit));
      assert.deepEqual(
        output.toolCalls.map((call) => JSON.parse(call.argumentsJson) as unknown),
        drawn.calls.map((call) => call.args),
      );
    }),
    { numRuns: 200 },
  );
});

const responseItem = fc.oneof(
  fc.record({ summaries: fc.array(text, { maxLength: 2 }), encrypted: fc.option(word, { nil: null }) }).map(
    ({ summaries, encrypted }) => ({
      type: "reasoning",
      summary: summaries.map((summary) => ({ type: "summary_text", text: summary })),
      encrypted_content: encrypted,
    }),
  ),
  fc
    .record({
      parts: fc.array(fc.record({ text, refusal: fc.boolean() }), { minLength: 1, maxLength: 3 }),
      phase: fc.option(fc.constantFrom("commentary", "final_answer"), { nil: null }),
    })
    .map(({ parts, phase }) => ({
      type: "message",
      role: "assistant",
      status: "completed",
      phase,
      content: parts.map((part) =>
        part.refusal
          ? { type: "refusal", refusal: part.text }
          : { type: "output_text", text: part.text, annotations: [] },
      ),
    })),
  fc.record({ callId: word, name: word, args: jsonObject }).map((call) => ({
    type: "function_call",
    call_id: call.callId,
    name: call.name,
    arguments: JSON.stringify(call.args),
  })),
);

test("a response keeps every item in order, and its cached input tokens", () => {
  fc.assert(
    fc.property(fc.array(responseItem, { maxLength: 5 }), count, count, (items, input, cached) => {
      const response = {
        id: "resp_p",
        object: "response",
        created_at: 0,
        model: "m",
        status: "completed",
        output: items.map((item, index) => ({ id: `item_${index}`, ...item })),
        parallel_tool_calls: true,
        tool_choice: "auto",
        tools: [],
        usage: {
          input_tokens: input,
          input_tokens_details: { cached_tokens: cached, cache_write_tokens: 0 },
          output_tokens: 1,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 0,
        },
      } as unknown as Response;
      const expected: unknown[][] = [];
      for (const item of response.output) {
        if (item.type === "reasoning") {
          expected.push(["reasoning_item", item.id, item.encrypted_content ?? "", item.summary.map((s) => s.text)]);
        } else if (item.type === "message") {
          for (const part of item.content) {
            const partText = part.type === "output_text" ? part.text : part.refusal;
            expected.push(item.phase ? ["text", partText, item.phase] : ["text", partText]);
          }
        } else if (item.type === "function_call") {
          expected.push(["tool_call", item.call_id, item.name, item.arguments]);
        }
      }
      const output = modelOutput(response);
      assert.deepEqual(kinds(output.assistant), expected);
      assert.equal(output.usage?.cacheReadTokens, BigInt(cached));
    }),
    { numRuns: 200 },
  );
});

const anthropicBlock = fc.oneof(
  fc.record({ type: fc.constant("text"), text: text.filter((t) => t !== ""), citations: fc.constant(null) }),
  fc.record({ type: fc.constant("thinking"), thinking: text, signature: word }),
  fc.record({ type: fc.constant("redacted_thinking"), data: word }),
  fc.record({ type: fc.constant("tool_use"), id: word, name: word, input: jsonObject }),
);

test("a message keeps signed thinking, text and tool input, and its cache reads and writes", () => {
  fc.assert(
    fc.property(
      fc.array(anthropicBlock, { minLength: 1, maxLength: 5 }),
      fc.option(count, { nil: null }),
      fc.option(count, { nil: null }),
      (content, read, write) => {
        const message = {
          id: "msg_p",
          type: "message",
          role: "assistant",
          model: "m",
          content,
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: {
            input_tokens: 1,
            output_tokens: 1,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: write,
          },
        } as unknown as Message;
        const output = modelOutput(message);
        const expected = message.content.map((block) => {
          if (block.type === "text") {
            return ["text", block.text];
          }
          if (block.type === "thinking") {
            return ["reasoning", block.thinking, block.signature];
          }
          if (block.type === "redacted_thinking") {
            return ["redacted", "anthropic", block.data];
          }
          assert.ok(block.type === "tool_use");
          return ["tool_call", block.id, block.name, JSON.stringify(block.input)];
        });
        assert.deepEqual(kinds(output.assistant), expected);
        assert.equal(output.usage?.cacheReadTokens, BigInt(read ?? 0));
        assert.equal(output.usage?.cacheWriteTokens, BigInt(write ?? 0));
      },
    ),
    { numRuns: 200 },
  );
});

test("a JSON tool value is its JSON.stringify text, and an Error an error result", () => {
  fc.assert(
    fc.property(fc.jsonValue().filter((value) => typeof value !== "string"), (value) => {
      const result = toolResult("call_1", value);
      const block = result.content[0]?.block;
      assert.ok(block?.case === "text");
      assert.equal(block.value.text, JSON.stringify(value));
      assert.equal(result.isError, false);
    }),
  );
  fc.assert(
    fc.property(word, text, (name, message) => {
      const error = new Error(message);
      error.name = name;
      const result = toolResult("call_1", error);
      const block = result.content[0]?.block;
      assert.ok(block?.case === "text" && result.isError);
      assert.equal(block.value.text, message ? `${name}: ${message}` : name);
    }),
  );
});
