/**
 * A line-oriented driver that lets another language's test drive this client:
 * `node dist/test/driver.js <baseUrl>` reads one JSON object per stdin line,
 * `{"method": "admit", "request": <proto JSON of AdmitRequest>}`, calls the method through
 * `createAdmissionClient`, and answers one line per request:
 * `{"ok": true, "response": <proto JSON, implicit fields included>}` or
 * `{"ok": false, "code": "not_found", "reason": "SESSION_NOT_FOUND", "message": "…"}`.
 * Used by tests/clients/test_cross_language.py.
 */
import { fromJson, toJson } from "@bufbuild/protobuf";
import type { DescMessage, JsonValue, Message } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { createInterface } from "node:readline";

import { AdmissionService, createAdmissionClient, errorReason } from "../src/index.js";

type Method = (request: Message) => Promise<Message>;

async function main(): Promise<void> {
  const baseUrl = process.argv[2];
  if (baseUrl === undefined) {
    throw new Error("usage: driver.js <baseUrl>");
  }
  const client = createAdmissionClient({ baseUrl, token: process.env["PAS_TOKEN"] });
  const methods = client as unknown as Record<string, Method>;
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") {
      continue;
    }
    const { method, request } = JSON.parse(line) as { method: string; request: JsonValue };
    const descriptor = AdmissionService.method[method as keyof typeof AdmissionService.method];
    let answer: JsonValue;
    try {
      if (descriptor === undefined) {
        throw new ConnectError(`no method ${method}`, Code.InvalidArgument);
      }
      const input: DescMessage = descriptor.input;
      const output: DescMessage = descriptor.output;
      const response = await (methods[method] as Method)(fromJson(input, request));
      answer = { ok: true, response: toJson(output, response, { alwaysEmitImplicit: true }) };
    } catch (err) {
      const error = ConnectError.from(err);
      answer = {
        ok: false,
        code: Code[error.code] ?? String(error.code),
        reason: errorReason(error) ?? "",
        message: error.rawMessage,
      };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
