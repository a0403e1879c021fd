/**
 * Responses of any size through the real server (issue 23 item 2): a FULL request over 4 MiB
 * reaches a client whose receive limit is gRPC's default 4 MiB, through StreamAdmit's 1 MiB
 * chunks, reassembled and verified by `admitStreamed`; a unary Admit of it is refused. Also
 * `reassemble`'s checks, and what a response carries (issue 23 item 1).
 */
import * as assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { after, before, test } from "node:test";

import { create, toBinary } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";

import {
  AdmitResponseSchema,
  ConnectError,
  MessageRole,
  Reason,
  RequestContent,
  StreamAdmitResponseSchema,
  StreamedResponseError,
  WireFormat,
  admitStreamed,
  createAdmissionClient,
  errorReason,
  reassemble,
  reconcileStreamed,
  userMessage,
} from "../src/index.js";
import type { AdmitRequestSchema, AdmitResponse } from "../src/index.js";
import { HarnessSession } from "../src/kit/index.js";
import { startServer } from "./server.js";
import type { RunningServer } from "./server.js";

const MIB = 1024 * 1024;
const ROUTE = { provider: "other", model: "big", contextWindow: 10_000_000n };

let server: RunningServer;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

/** A client that receives at most gRPC's default 4 MiB a message. */
function client() {
  return createAdmissionClient({ baseUrl: server.baseUrl, timeoutMs: 120_000, readMaxBytes: 4 * MIB });
}

/** A step recording the previous one's tool call, answered by `size` characters. */
function toolStep(
  sessionId: string,
  step: number,
  admissionId: string,
  size: number,
): MessageInitShape<typeof AdmitRequestSchema> {
  const callId = `call_${step}`;
  return {
    sessionId,
    turn: 1n,
    step: BigInt(step),
    renderedPrompt: "You read files.",
    route: ROUTE,
    previousOutput: {
      admissionId,
      assistant: {
        role: MessageRole.ASSISTANT,
        content: [
          { block: { case: "toolCall", value: { callId, name: "read", argumentsJson: '{"path":"f"}' } } },
        ],
      },
      toolResults: [
        {
          callId,
          content: [{ block: { case: "text", value: { text: String.fromCharCode(97 + step).repeat(size) } } }],
        },
      ],
    },
  };
}

for (const wireFormat of [WireFormat.NEUTRAL, WireFormat.ANTHROPIC_MESSAGES]) {
  test(`a FULL request over 4 MiB arrives streamed (${WireFormat[wireFormat]})`, async () => {
    const admission = client();
    const { session } = await admission.createSession({ sessionId: `ts-${randomUUID()}` });
    const sessionId = session!.sessionId;
    let step: AdmitResponse = await admitStreamed(admission, {
      sessionId,
      turn: 1n,
      step: 0n,
      renderedPrompt: "You read files.",
      route: ROUTE,
      users: [userMessage("Read the five files.")],
    });
    const size = 1_000_000; // five of them: 5 MB, each within the 1 MiB message limit
    for (let number = 1; number <= 4; number++) {
      step = await admitStreamed(admission, toolStep(sessionId, number, step.admissionId, size));
    }
    const last = { ...toolStep(sessionId, 5, step.admissionId, size), wireFormat, requestId: randomUUID() };

    const refused = await admission.admit(last).then(
      () => assert.fail("expected RESPONSE_TOO_LARGE"),
      (err: unknown) => ConnectError.from(err),
    );
    assert.equal(errorReason(refused), Reason.RESPONSE_TOO_LARGE);

    const streamed = await admitStreamed(admission, last);
    assert.ok(toBinary(AdmitResponseSchema, streamed).length > 4 * MIB);
    const expected = [1, 2, 3, 4, 5].map((n) => String.fromCharCode(97 + n).repeat(size));
    const request = streamed.request!;
    if (wireFormat === WireFormat.NEUTRAL) {
      assert.equal(request.content, RequestContent.MESSAGES);
      const results = request.messages
        .filter((m) => m.role === MessageRole.TOOL)
        .map((m) => m.content[0]?.block)
        .map((block) => (block?.case === "toolResult" ? block.value.content[0]?.block.value : undefined))
        .map((value) => (value as { text: string }).text);
      assert.deepEqual(results, expected);
    } else {
      assert.equal(request.content, RequestContent.BODY);
      assert.equal(request.messages.length, 0);
      const body = JSON.parse(request.bodyJson) as {
        messages: { role: string; content: string | { type: string; content?: { text: string }[] }[] }[];
      };
      const results = body.messages
        .filter((m) => m.role === "user" && Array.isArray(m.content))
        .flatMap((m) => m.content as { type: string; content?: { text: string }[] }[])
        .filter((block) => block.type === "tool_result")
        .map((block) => block.content![0]!.text);
      assert.deepEqual(results, expected);
    }

    // The same requestId replays the same response; a retry of the step reconciles it.
    const replayed = await admitStreamed(admission, last);
    assert.deepEqual(toBinary(AdmitResponseSchema, replayed), toBinary(AdmitResponseSchema, streamed));
    const reconciled = await reconcileStreamed(admission, {
      sessionId,
      admissionId: streamed.admissionId,
      route: ROUTE,
      wireFormat,
    });
    assert.equal(reconciled.request?.totalMessages, request.totalMessages);
  });
}

test("reassemble checks the size the first chunk announces and the SHA-256 one chunk carries", () => {
  const response = create(AdmitResponseSchema, { admissionId: "a", revision: 3n });
  const data = toBinary(AdmitResponseSchema, response);
  const sha256 = createHash("sha256").update(data).digest();
  const chunks = [
    create(StreamAdmitResponseSchema, { data: data.subarray(0, 3), totalBytes: BigInt(data.length), sha256 }),
    create(StreamAdmitResponseSchema, { data: data.subarray(3) }),
  ];
  assert.equal(reassemble(chunks, AdmitResponseSchema).admissionId, "a");
  assert.throws(() => reassemble(chunks.slice(0, 1), AdmitResponseSchema), StreamedResponseError);
  const changed = [chunks[0]!, create(StreamAdmitResponseSchema, { data: new Uint8Array(data.length - 3) })];
  assert.throws(() => reassemble(changed, AdmitResponseSchema), /SHA-256/);
  assert.throws(() => reassemble([], AdmitResponseSchema), /before its first chunk/);
  // The digest in the last chunk (what admitStreamed asks for), and never in none or two.
  const last = [
    create(StreamAdmitResponseSchema, { data: data.subarray(0, 3), totalBytes: BigInt(data.length) }),
    create(StreamAdmitResponseSchema, { data: data.subarray(3), sha256 }),
  ];
  assert.equal(reassemble(last, AdmitResponseSchema).admissionId, "a");
  const none = [last[0]!, create(StreamAdmitResponseSchema, { data: data.subarray(3) })];
  assert.throws(() => reassemble(none, AdmitResponseSchema), /0 chunks carried a SHA-256/);
  assert.throws(() => reassemble([chunks[0]!, last[1]!], AdmitResponseSchema), /2 chunks carried/);
});

test("the kit makes a step too large for one message again as StreamAdmit", async () => {
  const admission = client();
  const session = await HarnessSession.open(admission, {
    route: { provider: "other", model: "big-context" },
    wireFormat: WireFormat.ANTHROPIC_MESSAGES,
  });
  const files = [0, 1, 2, 3, 4].map((n) => String.fromCharCode(97 + n).repeat(1_000_000));
  const body = await session.admit({ prompt: "You read files.", users: files });
  const first = (body["messages"] as { content: { text: string }[] }[])[0]!;
  assert.deepEqual(
    first.content.map((block) => block.text),
    files,
  );
  assert.equal((session.last as AdmitResponse).request?.content, RequestContent.BODY);
  assert.deepEqual(await session.retry(), body);
});
