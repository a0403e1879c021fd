/**
 * A tool-using agent loop with the harness kit (README "Adopting it in a harness"), the
 * TypeScript twin of examples/harness_loop.py. After `make ts-build`, against a running service:
 *
 *   node clients/typescript/dist/examples/harnessLoop.js --provider anthropic      # recorded replies
 *   node clients/typescript/dist/examples/harnessLoop.js --provider deepseek \
 *     --base-url https://api.deepseek.com --api-key "$DEEPSEEK_API_KEY" --model deepseek-chat
 *
 * Without `--base-url` the official SDK posts to a local stand-in that answers the recorded
 * responses of tests/fixtures/harness/loops/ (so it runs offline); with it, to the real provider.
 */
import { readFileSync } from "node:fs";
import { resolve, sep } from "node:path";
import { parseArgs } from "node:util";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

import { WireFormat, createAdmissionClient } from "../src/index.js";
import type { ToolCallBlock } from "../src/index.js";
import { HarnessSession, tool } from "../src/kit/index.js";
import type { AnthropicBody, Body, ChatBody, ResponsesBody } from "../src/kit/index.js";
import { startProviderServer } from "../test/providerServer.js";
import type { Reply } from "../test/providerServer.js";

const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const PROMPT = "You are a careful coding agent. Use read_file to look at files before answering.";
const TOOLS = [
  tool("read_file", "Read a text file below the current directory", {
    type: "object",
    properties: { path: { type: "string" } },
    required: ["path"],
  }),
];
// provider option: route provider, wire format, default model, recorded loop
const PROVIDERS: Record<string, [string, WireFormat, string, string]> = {
  openai: ["openai", WireFormat.OPENAI_CHAT, "gpt-5.1", "openai-openai_chat"],
  "openai-responses": ["openai", WireFormat.OPENAI_RESPONSES, "gpt-5.1", "openai-openai_responses"],
  deepseek: ["deepseek", WireFormat.OPENAI_CHAT, "deepseek-chat", "deepseek-openai_chat"],
  anthropic: ["anthropic", WireFormat.ANTHROPIC_MESSAGES, "claude-sonnet-4-5", "anthropic-anthropic_messages"],
};

export interface LoopOptions {
  provider: string;
  baseUrl: string;
  apiKey: string;
  model: string;
  target: string;
  token?: string;
  questions: string[];
}

function poster(options: LoopOptions, model: string): (body: Body) => Promise<unknown> {
  if (options.provider === "anthropic") {
    const claude = new Anthropic({ apiKey: options.apiKey, baseURL: options.baseUrl, maxRetries: 0 });
    return (body) => claude.messages.create({ model, max_tokens: 2048, ...(body as AnthropicBody) });
  }
  const gpt = new OpenAI({ apiKey: options.apiKey, baseURL: options.baseUrl, maxRetries: 0 });
  if (options.provider === "openai-responses") {
    return (body) => gpt.responses.create({ model, ...(body as ResponsesBody) });
  }
  return (body) => gpt.chat.completions.create({ model, ...(body as ChatBody) });
}

function callTool(call: ToolCallBlock): unknown {
  try {
    const path = resolve((JSON.parse(call.argumentsJson) as { path: string }).path);
    if (!path.startsWith(process.cwd() + sep)) {
      throw Object.assign(new Error(`${path} is outside the current directory`), { name: "PermissionError" });
    }
    return readFileSync(path, "utf8").slice(0, 4000);
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err)); // an error result
  }
}

/** Runs the loop; returns what it printed. */
export async function run(options: LoopOptions): Promise<string[]> {
  const [provider, wireFormat, defaultModel] = PROVIDERS[options.provider]!;
  const model = options.model || defaultModel;
  const post = poster(options, model);
  const client = createAdmissionClient({ baseUrl: options.target, token: options.token });
  const session = await HarnessSession.open(client, { route: { provider, model }, wireFormat });
  const printed: string[] = [];
  try {
    for (const question of options.questions) {
      let users = [question];
      let answer = "";
      for (;;) {
        const body = await session.admit({ prompt: PROMPT, users, tools: TOOLS });
        const reply = session.observe(await post(body));
        users = [];
        for (const call of reply.toolCalls) session.toolResult(call, callTool(call));
        answer = reply.text;
        if (reply.toolCalls.length === 0) break;
      }
      printed.push(`[turn ${session.turn}] ${question}\n  -> ${answer}`);
    }
  } finally {
    await session.close();
  }
  printed.push(`session ${session.sessionId}: ${session.turn} turns, recorded`);
  return printed;
}

/** The loop on a local stand-in answering the recorded replies of `options.provider`. */
export async function runRecorded(options: Omit<LoopOptions, "baseUrl">): Promise<string[]> {
  const standIn = await startProviderServer();
  const fixture = join(REPO_ROOT, "tests/fixtures/harness/loops", `${PROVIDERS[options.provider]![3]}.json`);
  standIn.answer(...(JSON.parse(readFileSync(fixture, "utf8")) as { replies: Reply[] }).replies);
  try {
    return await run({ ...options, baseUrl: standIn.baseUrl });
  } finally {
    await standIn.close();
  }
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      provider: { type: "string", default: "anthropic" },
      "base-url": { type: "string", default: "" },
      "api-key": { type: "string", default: "recorded" },
      model: { type: "string", default: "" },
      target: { type: "string", default: "http://127.0.0.1:50051" },
      token: { type: "string" },
    },
    allowPositionals: true,
  });
  if (!(values.provider in PROVIDERS)) {
    throw new Error(`--provider: one of ${Object.keys(PROVIDERS).join(", ")}`);
  }
  const options = {
    provider: values.provider,
    apiKey: values["api-key"],
    model: values.model,
    target: values.target,
    token: values.token,
    questions: positionals.length ? positionals : ["Read main.py and explain it.", "Plan the merge of a.py and b.py."],
  };
  const printed = values["base-url"] ? await run({ ...options, baseUrl: values["base-url"] }) : await runRecorded(options);
  console.log(printed.join("\n"));
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  });
}
