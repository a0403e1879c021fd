/**
 * An agent loop end to end with the kit, per provider and wire format (the TypeScript twin of
 * tests/clients/test_harness_loop.py, on the same recorded responses,
 * tests/fixtures/harness/loops/): admit → post the body through the official SDK to a local
 * provider stand-in → observe → tool results → next admit, over three turns with a prompt
 * change and a compaction, against the real server. Each body the SDK posted must be the kit's
 * and equal the FULL body Inspect renders (the Python suite checks those against the SDK param
 * types and the acceptance rules); ids, signatures and reasoning come back in the next request.
 */
import * as assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

import { EventKind, RequestView, SystemPromptUpdate, WireFormat, createAdmissionClient } from "../src/index.js";
import type { AdmissionClient, RouteSchema } from "../src/index.js";
import { HarnessSession, tool } from "../src/kit/index.js";
import type { AnthropicBody, ChatBody, ResponsesBody } from "../src/kit/index.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { runRecorded } from "../examples/harnessLoop.js";
import { startProviderServer } from "./providerServer.js";
import type { Json, ProviderServer, Reply } from "./providerServer.js";
import { REPO_ROOT, startServer } from "./server.js";
import type { RunningServer } from "./server.js";

const TOOLS = [
  tool("read_file", "Read a file", {
    type: "object",
    properties: { path: { type: "string" } },
    required: ["path"],
  }),
];
const PROMPT = "You are a careful coding agent.";
const PLAN_PROMPT = "You are a careful coding agent.\nPLAN MODE: propose, do not edit.";

interface Provider {
  name: string;
  wire: WireFormat;
  fixture: string;
  route: MessageInitShape<typeof RouteSchema>;
  post: (provider: ProviderServer, body: Json) => Promise<unknown>;
}

function openai(provider: ProviderServer): OpenAI {
  return new OpenAI({ apiKey: "test", baseURL: `${provider.baseUrl}/v1`, maxRetries: 0 });
}

const PROVIDERS: Provider[] = [
  {
    name: "openai",
    wire: WireFormat.OPENAI_CHAT,
    fixture: "openai-openai_chat",
    route: { provider: "openai", model: "gpt-5.1" },
    post: (p, body) => openai(p).chat.completions.create({ model: "m", temperature: 0, ...(body as ChatBody) }),
  },
  {
    name: "deepseek",
    wire: WireFormat.OPENAI_CHAT,
    fixture: "deepseek-openai_chat",
    route: { provider: "deepseek", model: "deepseek-flash" },
    post: (p, body) => openai(p).chat.completions.create({ model: "m", temperature: 0, ...(body as ChatBody) }),
  },
  {
    name: "openai",
    wire: WireFormat.OPENAI_RESPONSES,
    fixture: "openai-openai_responses",
    route: { provider: "openai", model: "gpt-5.1", systemPromptUpdate: SystemPromptUpdate.IN_HISTORY },
    post: (p, body) => openai(p).responses.create({ model: "m", ...(body as ResponsesBody) }),
  },
  {
    name: "anthropic",
    wire: WireFormat.ANTHROPIC_MESSAGES,
    fixture: "anthropic-anthropic_messages",
    route: { provider: "anthropic", model: "claude-sonnet-4-5" },
    post: (p, body) =>
      new Anthropic({ apiKey: "test", baseURL: p.baseUrl, maxRetries: 0 }).messages.create({
        model: "m",
        max_tokens: 1024,
        ...(body as AnthropicBody),
      }),
  },
];

let server: RunningServer;
let provider: ProviderServer;
let client: AdmissionClient;

before(async () => {
  server = await startServer();
  provider = await startProviderServer();
  client = createAdmissionClient({ baseUrl: server.baseUrl });
});

after(async () => {
  await provider?.close();
  await server?.stop();
});

function replies(fixture: string): Reply[] {
  const path = join(REPO_ROOT, "tests/fixtures/harness/loops", `${fixture}.json`);
  return (JSON.parse(readFileSync(path, "utf8")) as { replies: Reply[] }).replies;
}

for (const p of PROVIDERS) {
  test(`${p.fixture}: a tool-using loop over three turns with a prompt change and a compaction`, async () => {
    provider.requests.length = 0;
    provider.answer(...replies(p.fixture));
    const session = await HarnessSession.open(client, { route: p.route, wireFormat: p.wire });
    const views: RequestView[] = [];
    const step = async (body: Json): Promise<unknown> => {
      views.push(session.last?.request?.view ?? RequestView.UNSPECIFIED);
      const response = await p.post(provider, body);
      const posted = provider.requests.at(-1)!.body;
      assert.deepEqual(Object.fromEntries(Object.keys(body).map((key) => [key, posted[key]])), body);
      const full = await client.inspect({ sessionId: session.sessionId, wireFormat: p.wire });
      assert.deepEqual(JSON.parse(full.request?.bodyJson ?? ""), body, "the rebuilt body is not the FULL body");
      return response;
    };
    try {
      for (const [prompt, user] of [
        [PROMPT, "Read main.py."],
        [PLAN_PROMPT, "Plan the merge of a.py and b.py."],
      ] as const) {
        let users: string[] = [user];
        for (;;) {
          const body = await session.admit({ prompt, users, tools: TOOLS, config: { temperature: 0 } });
          const reply = session.observe(await step(body));
          users = [];
          for (const call of reply.toolCalls) {
            const path = (JSON.parse(call.argumentsJson) as { path: string }).path;
            session.toolResult(call, path === "b.py" ? Object.assign(new Error(path), { name: "FileNotFoundError" }) : { path, text: `print('${path}')`, lines: 1 });
          }
          if (reply.toolCalls.length === 0) {
            break;
          }
        }
      }
      await session.compact(async (plan) => {
        assert.ok(plan.summarizationInput.length > 0);
        return "Summary: read main.py, planned to merge a.py and b.py.";
      }, { retainTokens: 0 });
      const body = await session.admit({ prompt: PLAN_PROMPT, users: ["What is left?"], tools: TOOLS, config: { temperature: 0 } });
      session.observe(await step(body));
    } finally {
      await session.close();
    }
    assert.deepEqual([session.turn, session.step], [3, 1]);
    const inspected = await client.inspect({ sessionId: session.sessionId });
    const last = inspected.request!.messages.at(-1)!.content.at(-1)!.block;
    assert.ok(last.case === "text" && last.value.text === "Nothing is left.");
    const observed = inspected.ledger.flatMap((entry) => (entry.observed ? [entry.observed] : []));
    assert.equal(observed.length, 5);
    assert.ok(observed.every((usage) => usage.cacheReadTokens > 0n));
    assert.ok(views.includes(RequestView.DELTA), "the kit rebuilt DELTA answers");
    const posted = JSON.stringify(provider.requests.map((request) => request.body));
    for (const callId of p.name === "anthropic" ? ["toolu_1"] : ["call_1", "call_2", "call_3"]) {
      assert.ok(posted.includes(callId));
    }
    if (p.name === "anthropic") {
      assert.ok(JSON.stringify(provider.requests[1]!.body["messages"]).includes("EqQBCkYIBRgCKkDsig=="));
    }
    if (p.name === "deepseek") {
      assert.ok(posted.includes('"reasoning_content":"Need the file."'));
    }
  });
}

test("an Anthropic Messages DELTA carries only what changed and the kit rebuilds the FULL body", async () => {
  const session = await HarnessSession.open<AnthropicBody>(client, {
    route: { provider: "anthropic", model: "claude-sonnet-4-5", systemPromptUpdate: SystemPromptUpdate.IN_HISTORY },
    wireFormat: WireFormat.ANTHROPIC_MESSAGES,
  });
  const sent = () => session.last!.request!;
  const admit = async (prompt: string, user: string) => {
    const body = await session.admit({ prompt, users: [user], tools: TOOLS });
    const full = await client.inspect({ sessionId: session.sessionId, wireFormat: WireFormat.ANTHROPIC_MESSAGES });
    assert.equal(JSON.stringify(body), full.request!.bodyJson, "the rebuilt body is not the FULL body, byte for byte");
    const tail = JSON.parse(sent().bodyJson) as { messages: { role: string }[]; system?: string };
    return { view: sent().view, replaced: sent().replacedBodyItems, tail, roles: tail.messages.map((m) => m.role) };
  };
  const first = await admit(PROMPT, "Read main.py.");
  assert.equal(first.view, RequestView.FULL);
  assert.equal(first.tail.system, PROMPT);
  // Admitted again before any model call: the user merges into the held user turn, which is
  // all the DELTA carries (it replaces the held one).
  const merged = await admit(PROMPT, "And the tests.");
  assert.deepEqual([merged.view, merged.replaced, merged.roles], [RequestView.DELTA, 1n, ["user"]]);
  assert.equal(merged.tail.system, undefined, "the held body's system stays");
  // The model's answer, then a prompt change in the history and a user: only the new items.
  session.observe({
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: "m",
    content: [{ type: "text", text: "main.py starts the server." }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 20, output_tokens: 6 },
  });
  const appended = await admit(PLAN_PROMPT, "Plan the merge.");
  assert.deepEqual([appended.view, appended.replaced, appended.roles], [RequestView.DELTA, 0n, ["assistant", "user", "system"]]);
  // A user again before the model answers: it joins the held user turn, before the update.
  const moved = await admit(PLAN_PROMPT, "Keep b.py.");
  assert.deepEqual([moved.view, moved.replaced, moved.roles], [RequestView.DELTA, 2n, ["user", "system"]]);
  await session.close();
});

test("an Admit whose answer was lost is retried under the same requestId", async () => {
  const seen: string[] = [];
  let lost = false;
  const losing = createAdmissionClient({
    baseUrl: server.baseUrl,
    interceptors: [
      (next) => async (req) => {
        const response = await next(req);
        if (req.method.name === "Admit") {
          seen.push((req.message as unknown as { requestId: string }).requestId);
          if (!lost) {
            lost = true;
            throw new Error("the answer was lost");
          }
        }
        return response;
      },
    ],
    retries: 0,
  });
  const session = await HarnessSession.open<ChatBody>(losing, {
    route: { provider: "deepseek", model: "deepseek-flash" },
    wireFormat: WireFormat.OPENAI_CHAT,
  });
  await assert.rejects(session.admit({ prompt: PROMPT, users: ["Hello"] }));
  const body = await session.admit({ prompt: PROMPT, users: ["Hello"] });
  assert.deepEqual(body.messages.map((message) => message.role), ["system", "user"]);
  // A provider failure: the step again on a fallback route (Reconcile), the same body.
  assert.deepEqual(await session.retry({ provider: "deepseek", model: "deepseek-pro" }), body);
  assert.equal((session.last as { attempt?: bigint }).attempt, 1n);
  assert.equal(seen.length, 2);
  assert.equal(seen[0], seen[1]);
  const { events } = await client.listEvents({ sessionId: session.sessionId, pageSize: 100 });
  assert.equal(events.filter((event) => event.kind === EventKind.USER_MESSAGE).length, 1, "the retry admitted the step twice");
});

for (const option of ["openai", "openai-responses", "deepseek", "anthropic"]) {
  test(`the example runs on the recorded replies (${option})`, async () => {
    const printed = await runRecorded({
      provider: option,
      apiKey: "recorded",
      model: "",
      target: server.baseUrl,
      questions: ["Read main.py and explain it.", "Plan the merge of a.py and b.py."],
    });
    assert.match(printed.join("\n"), /\[turn 2\] Plan the merge[\s\S]*2 turns, recorded/);
  });
}
