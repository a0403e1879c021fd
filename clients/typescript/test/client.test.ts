import * as assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";

import {
  CapabilitySource,
  Code,
  ConnectError,
  ERROR_DOMAIN,
  EventKind,
  PromptLocation,
  Reason,
  SystemPromptUpdate,
  createAdmissionClient,
  createAdmissionTransport,
  errorInfo,
  errorReason,
  fieldViolations,
  isRetryable,
  assistantMessage,
  userMessage,
} from "../src/index.js";
import type { AdmissionClientOptions, AdmitRequest, AdmitRequestSchema } from "../src/index.js";
import { startServer } from "./server.js";
import type { RunningServer } from "./server.js";

let server: RunningServer;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

function client(options: Partial<AdmissionClientOptions> = {}) {
  return createAdmissionClient({ baseUrl: server.baseUrl, ...options });
}

function admitRequest(sessionId: string): MessageInitShape<typeof AdmitRequestSchema> {
  return {
    sessionId,
    turn: 1n,
    step: 1n,
    renderedPrompt: "You are terse.",
    route: { provider: "deepseek", model: "deepseek-flash" },
    users: [userMessage("Hello")],
  };
}

async function newSession(): Promise<string> {
  const { session } = await client().createSession({ sessionId: `ts-${randomUUID()}` });
  assert.ok(session);
  return session.sessionId;
}

/** An interceptor inside the client's own: sees every attempt, can fail it. */
function recorder(onAttempt: (attempt: number, requestId: string) => "pass" | "lose" | "fail") {
  const requestIds: string[] = [];
  const interceptor: Interceptor = (next) => async (req) => {
    const message = req.message as unknown as { requestId?: string };
    requestIds.push(message.requestId ?? "");
    const action = onAttempt(requestIds.length, message.requestId ?? "");
    if (action === "fail") {
      throw new ConnectError("injected: connection refused", Code.Unavailable);
    }
    const response = await next(req);
    if (action === "lose") {
      throw new ConnectError("injected: response lost", Code.Unavailable);
    }
    return response;
  };
  return { interceptor, requestIds };
}

test("admits and inspects on the real server, the capability coming from the catalog", async () => {
  const sessionId = await newSession();
  const admitted = await client().admit(admitRequest(sessionId));

  assert.equal(admitted.systemPromptUpdate, SystemPromptUpdate.IN_HISTORY);
  assert.equal(admitted.capabilitySource, CapabilitySource.CATALOG);
  assert.deepEqual(
    admitted.request?.messages.map((m) => m.content[0]?.block.value),
    [
      { $typeName: "promptadmission.v1.TextBlock", text: "You are terse.", phase: "" },
      { $typeName: "promptadmission.v1.TextBlock", text: "Hello", phase: "" },
    ],
  );
  const view = await client().inspect({ sessionId });
  assert.equal(view.effectivePrompt?.text, "You are terse.");
  assert.equal(view.effectivePrompt?.location, PromptLocation.HEAD);
  assert.equal(view.revision, admitted.revision);
});

test("errors carry the service's ErrorInfo reason and field violations", async () => {
  const missing = await client()
    .getSession({ sessionId: `missing-${randomUUID()}` })
    .then(() => assert.fail("expected NOT_FOUND"), (err: unknown) => ConnectError.from(err));
  assert.equal(missing.code, Code.NotFound);
  assert.equal(errorReason(missing), Reason.SESSION_NOT_FOUND);
  assert.equal(errorInfo(missing)?.domain, ERROR_DOMAIN);
  assert.equal(isRetryable(missing), false);

  const sessionId = await newSession();
  const invalid = await client()
    .admit({ ...admitRequest(sessionId), route: undefined })
    .then(() => assert.fail("expected INVALID_ARGUMENT"), (err: unknown) => ConnectError.from(err));
  assert.equal(invalid.code, Code.InvalidArgument);
  assert.equal(errorReason(invalid), Reason.INVALID_FIELD);
  assert.deepEqual(
    fieldViolations(invalid).map((v) => v.field),
    ["route"],
  );
});

test("a lost response is retried with the same requestId and commits once", async () => {
  const sessionId = await newSession();
  const { interceptor, requestIds } = recorder((attempt) => (attempt === 1 ? "lose" : "pass"));
  const request = admitRequest(sessionId);

  const admitted = await client({ interceptors: [interceptor], retryBaseDelayMs: 1 }).admit(request);

  assert.equal(requestIds.length, 2);
  assert.match(requestIds[0] ?? "", /^[0-9a-f-]{36}$/);
  assert.equal(requestIds[1], requestIds[0]);
  assert.equal((request as AdmitRequest).requestId, undefined, "the caller's request is untouched");
  const { events } = await client().listEvents({ sessionId });
  assert.deepEqual(
    events.map((e) => e.kind),
    [
      EventKind.SYSTEM_MESSAGE,
      EventKind.USER_MESSAGE,
      EventKind.REQUEST_HEADER,
      EventKind.REQUEST_CONTEXT,
    ],
  );
  assert.ok(events.every((e) => e.admissionId === admitted.admissionId));
});

test("a caller's requestId is kept across retries", async () => {
  const sessionId = await newSession();
  const { interceptor, requestIds } = recorder((attempt) => (attempt < 3 ? "fail" : "pass"));

  await client({ interceptors: [interceptor], retryBaseDelayMs: 1 }).admit({
    ...admitRequest(sessionId),
    requestId: "my-step-1",
  });

  assert.deepEqual(requestIds, ["my-step-1", "my-step-1", "my-step-1"]);
});

test("a revision mismatch is not retried", async () => {
  const sessionId = await newSession();
  const { interceptor, requestIds } = recorder(() => "pass");

  const err = await client({ interceptors: [interceptor] })
    .admit({ ...admitRequest(sessionId), expectedRevision: 999n })
    .then(() => assert.fail("expected ABORTED"), (e: unknown) => ConnectError.from(e));

  assert.equal(err.code, Code.Aborted);
  assert.equal(errorReason(err), Reason.REVISION_MISMATCH);
  assert.equal(requestIds.length, 1);
});

test("retries give up at the call's deadline", async () => {
  const { interceptor, requestIds } = recorder(() => "fail");
  const started = Date.now();

  const err = await client({
    interceptors: [interceptor],
    timeoutMs: 300,
    retries: 100,
    retryBaseDelayMs: 20,
  })
    .listSessions({})
    .then(() => assert.fail("expected UNAVAILABLE"), (e: unknown) => ConnectError.from(e));

  assert.equal(err.code, Code.Unavailable);
  assert.ok(requestIds.length > 1 && requestIds.length < 100);
  assert.ok(Date.now() - started < 1_000);
});

test("the bearer token goes out as authorization metadata", async () => {
  const seen: (string | null)[] = [];
  const interceptor: Interceptor = (next) => async (req) => {
    seen.push(req.header.get("authorization"));
    return next(req);
  };

  await client({ token: "s3cret", interceptors: [interceptor] }).listSessions({ pageSize: 1 });
  await client({ interceptors: [interceptor] }).listSessions({ pageSize: 1 });

  assert.deepEqual(seen, ["Bearer s3cret", null]);
});

test("a call about one session names it in x-pas-session (balancer affinity)", async () => {
  const seen: (string | null)[] = [];
  const interceptor: Interceptor = (next) => async (req) => {
    seen.push(req.header.get("x-pas-session"));
    return next(req);
  };
  const sessionId = await newSession();

  await client({ interceptors: [interceptor] }).getSession({ sessionId });
  await client({ interceptors: [interceptor] }).listSessions({ pageSize: 1 });

  assert.deepEqual(seen, [sessionId, null]);
});

test("a client can be built on a given transport", async () => {
  const transport = createAdmissionTransport({ baseUrl: server.baseUrl, timeoutMs: 5_000 });
  const sessionId = await newSession();

  const { session } = await createAdmissionClient(transport).getSession({ sessionId });

  assert.equal(session?.sessionId, sessionId);
});

test("one call per step: the previous output is recorded and the next step admitted", async () => {
  const sessionId = await newSession();
  let step = await client().admit(admitRequest(sessionId));
  for (const number of [2n, 3n]) {
    step = await client().admit({
      sessionId,
      turn: 1n,
      step: number,
      renderedPrompt: "You are terse.",
      route: { provider: "deepseek", model: "deepseek-flash" },
      users: [userMessage(`and step ${number}?`)],
      previousOutput: {
        admissionId: step.admissionId,
        assistant: assistantMessage(`answer ${number - 1n}`),
        usage: { inputTokens: 10n, outputTokens: 3n },
      },
    });
    assert.ok(step.recorded !== undefined);
    assert.ok((step.recorded.assistantSeq ?? 0n) < (step.userSeqs[0] ?? 0n));
  }
  const view = await client().inspect({ sessionId });
  assert.deepEqual(
    view.request?.messages.map((m) => (m.content[0]?.block.value as { text: string }).text),
    ["You are terse.", "Hello", "answer 1", "and step 2?", "answer 2", "and step 3?"],
  );
});
