/**
 * A line-oriented driver of the TypeScript kit's converters, for
 * tests/clients/test_harness_cross_language.py: `node dist/test/kitDriver.js` reads one JSON
 * object per stdin line, `{"response": <a provider response as its API sends it>, "provider":
 * "anthropic"}`, and answers one line: `{"ok": true, "output": <base64 of the StepOutput with the
 * converted assistant and usage>}` or `{"ok": false, "error": "…"}`.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { createInterface } from "node:readline";

import { StepOutputSchema } from "../src/index.js";
import { modelOutput } from "../src/kit/index.js";

async function main(): Promise<void> {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") {
      continue;
    }
    const { response, provider } = JSON.parse(line) as { response: unknown; provider: string };
    let answer: Record<string, unknown>;
    try {
      const output = modelOutput(response, provider);
      const step = create(StepOutputSchema, { assistant: output.assistant, usage: output.usage });
      answer = { ok: true, output: Buffer.from(toBinary(StepOutputSchema, step)).toString("base64") };
    } catch (err) {
      answer = { ok: false, error: String(err) };
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
