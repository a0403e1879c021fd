/**
 * The keyless golden scenario shared with the Python client (tests/clients/snapshot.py must
 * stay step-for-step identical): on an in-history replay route, a tool call and its result, then
 * a prompt change after the first tool call. Its typed event log, without commit times and
 * admission ids, is pinned in tests/snapshots/system-prompt-in-history.json.
 */
import { toJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { join } from "node:path";

import {
  EventSchema,
  MessageRole,
  SystemPromptUpdate,
  assistantMessage,
  userMessage,
} from "../src/index.js";
import type { AdmissionClient, Event } from "../src/index.js";
import { REPO_ROOT } from "./server.js";

export const SNAPSHOT_PATH = join(REPO_ROOT, "tests/snapshots/system-prompt-in-history.json");

export const SCENARIO =
  "system-prompt-in-history: an in-history replay route; step 1 admits prompt A with one tool " +
  "and a user message, then records a tool call and its result; step 2 admits prompt B (A plus " +
  "a plan-mode section) and records the reply. Commit times and admission ids are left out.";

const ROUTE = {
  provider: "replay",
  model: "replay-in-history",
  contextWindow: 65536n,
  systemPromptUpdate: SystemPromptUpdate.IN_HISTORY,
};
const TOOLS = [
  {
    name: "read_file",
    description: "Read a file from the workspace.",
    parametersJson:
      '{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}',
  },
];
const PROMPT_A = "You are a careful coding agent.\n\nUse read_file before answering questions about files.";
const PROMPT_B = `${PROMPT_A}\n\n## Plan mode\nPlan before you edit: list the steps, then wait for approval.`;
/** Fields that differ from run to run: times and ids the service generates. */
const IGNORED_FIELDS = ["commitTime", "admissionId"];

/** Runs the scenario on a new session `sessionId` and returns its golden form. */
export async function runSnapshotScenario(
  client: AdmissionClient,
  sessionId: string,
): Promise<JsonObject> {
  await client.createSession({ sessionId });
  const first = await client.admit({
    sessionId,
    turn: 1n,
    step: 1n,
    renderedPrompt: PROMPT_A,
    tools: TOOLS,
    route: ROUTE,
    users: [userMessage("What does README.md say?")],
  });
  await client.record({
    sessionId,
    admissionId: first.admissionId,
    assistant: {
      role: MessageRole.ASSISTANT,
      content: [
        {
          block: {
            case: "toolCall",
            value: { callId: "call_1", name: "read_file", argumentsJson: '{"path":"README.md"}' },
          },
        },
      ],
    },
    toolResults: [
      {
        callId: "call_1",
        content: [{ block: { case: "text", value: { text: "# Demo\nA demo project." } } }],
      },
    ],
  });
  const second = await client.admit({
    sessionId,
    turn: 1n,
    step: 2n,
    renderedPrompt: PROMPT_B,
    tools: TOOLS,
    route: ROUTE,
  });
  await client.record({
    sessionId,
    admissionId: second.admissionId,
    assistant: assistantMessage("README.md describes a demo project."),
  });
  const events: Event[] = [];
  let pageToken = "";
  do {
    const page = await client.listEvents({ sessionId, pageSize: 1000, pageToken });
    events.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return { scenario: SCENARIO, events: events.map(goldenEvent) };
}

function goldenEvent(event: Event): JsonObject {
  const json = toJson(EventSchema, event, { alwaysEmitImplicit: true }) as JsonObject;
  for (const field of IGNORED_FIELDS) {
    delete json[field];
  }
  return json;
}

/**
 * The golden file's text: JSON with sorted keys, two-space indentation and a final newline,
 * byte-identical to Python's `json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)`.
 */
export function canonicalJson(value: JsonValue): string {
  return `${JSON.stringify(sortKeys(value), null, 2)}\n`;
}

function sortKeys(value: JsonValue): JsonValue {
  if (Array.isArray(value)) {
    return value.map(sortKeys);
  }
  if (value !== null && typeof value === "object") {
    const sorted: JsonObject = {};
    for (const key of Object.keys(value).sort()) {
      sorted[key] = sortKeys(value[key] as JsonValue);
    }
    return sorted;
  }
  return value;
}
