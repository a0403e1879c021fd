/**
 * The TypeScript client's windowed prompt fold: the shared fixtures
 * (tests/fixtures/prompt_fold/cases.json, which the Python client and the service also satisfy)
 * and a real session folded from paged ListEvents, checked against Inspect and ListTrajectory.
 */
import * as assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { fromJson } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";

import {
  EventSchema,
  allTrajectory,
  createAdmissionClient,
  foldSystemPrompt,
  inspectSystemPrompt,
  userMessage,
} from "../src/index.js";
import type { Event, PromptFoldState, PromptNode } from "../src/index.js";
import { REPO_ROOT, startServer } from "./server.js";
import type { RunningServer } from "./server.js";

interface FixtureCase {
  readonly name: string;
  readonly events: JsonValue[];
  readonly states: unknown[];
}

const CASES: FixtureCase[] = (
  JSON.parse(readFileSync(join(REPO_ROOT, "tests/fixtures/prompt_fold/cases.json"), "utf8")) as {
    cases: FixtureCase[];
  }
).cases;

function nodeJson(node: PromptNode | undefined) {
  if (node === undefined) return null;
  return { seq: node.seq, turn: node.turn, step: node.step, text: node.text, update: node.update };
}

function stateJson(state: PromptFoldState | undefined) {
  if (state === undefined) return null;
  return {
    firstSeq: state.firstSeq,
    uncertain: state.uncertain,
    nodes: state.nodes.map((item) => ({ position: item.position, node: nodeJson(item.node) })),
    replacements: [...state.replacements].sort((a, b) => a[0] - b[0]),
    effective: nodeJson(state.effective),
    introduced: nodeJson(state.introduced),
  };
}

test("the fixtures hold the reference cases and windowed sessions", () => {
  assert.ok(CASES.length > 10);
});

for (const fixture of CASES) {
  test(`fixture: ${fixture.name}`, () => {
    let state: PromptFoldState | undefined;
    const history: (PromptFoldState | undefined)[] = [];
    fixture.events.forEach((json, index) => {
      state = inspectSystemPrompt(state, fromJson(EventSchema, json));
      history.push(state);
      assert.deepEqual(stateJson(state), fixture.states[index]);
    });
    // Earlier states are untouched by later events.
    assert.deepEqual(history.map(stateJson), fixture.states);
  });
}

let server: RunningServer;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

test("a real session folded from paged ListEvents agrees with Inspect and ListTrajectory", async () => {
  const client = createAdmissionClient({ baseUrl: server.baseUrl });
  const { session } = await client.createSession({ sessionId: `ts-fold-${randomUUID()}` });
  const sessionId = session!.sessionId;
  const inHistory = { provider: "deepseek", model: "deepseek-flash" };
  const replace = { provider: "openai", model: "gpt-test" };
  const steps: [string, typeof inHistory, boolean][] = [
    ["A", inHistory, false],
    ["B", inHistory, false],
    ["C", inHistory, false],
    ["C plan", inHistory, true],
    ["D", replace, false],
    ["E", inHistory, false],
    ["", inHistory, false],
    ["F", inHistory, false],
  ];
  let step = 0n;
  for (const [prompt, route, startsRequestSeries] of steps) {
    step += 1n;
    await client.admit({
      sessionId,
      turn: 1n,
      step,
      renderedPrompt: prompt,
      route,
      startsRequestSeries,
      users: [userMessage(`u${step}`)],
    });
  }
  const events: Event[] = [];
  let pageToken = "";
  do {
    const page = await client.listEvents({ sessionId, pageSize: 3, pageToken });
    events.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  const view = await client.inspect({ sessionId });
  const trajectory = await allTrajectory(client, sessionId);
  const entries = trajectory.entries.map((entry) => trajectory.resolved(entry));

  const state = foldSystemPrompt(events);
  assert.equal(state?.uncertain, false);
  assert.equal(state?.effective?.text, view.effectivePrompt?.text);
  assert.deepEqual(
    state?.nodes.map((item) => [item.node.seq, item.node.text, item.node.update]),
    view.systemNodes.map((node) => [Number(node.seq), node.text, node.update]),
  );
  assert.equal(entries.length, steps.length);
  for (const entry of entries) {
    const at = foldSystemPrompt(events.filter((event) => event.seq < entry.logSeq));
    assert.deepEqual(
      [at?.effective?.seq, at?.effective?.text, at?.effective?.update],
      [
        Number(entry.effectivePrompt?.seq),
        entry.effectivePrompt?.text,
        entry.effectivePrompt?.update,
      ],
    );
  }
  // By reference: the page names each prompt by version and carries each distinct text once.
  const distinct = new Set(steps.map(([prompt]) => prompt).filter((prompt) => prompt !== ""));
  assert.deepEqual(new Set(trajectory.systemPrompts.values()), distinct);
  for (const entry of trajectory.entries) assert.equal(entry.effectivePrompt?.text, "");
});
