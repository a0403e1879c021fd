import * as assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { after, before, test } from "node:test";

import { createAdmissionClient } from "../src/index.js";
import { startServer } from "./server.js";
import type { RunningServer } from "./server.js";
import { SNAPSHOT_PATH, canonicalJson, runSnapshotScenario } from "./snapshot.js";

let server: RunningServer;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

test("the TypeScript client reproduces the golden system-prompt-in-history events", async () => {
  const client = createAdmissionClient({ baseUrl: server.baseUrl });
  const actual = canonicalJson(await runSnapshotScenario(client, `snapshot-ts-${randomUUID()}`));

  if (process.env["UPDATE_SNAPSHOTS"] === "1") {
    mkdirSync(dirname(SNAPSHOT_PATH), { recursive: true });
    writeFileSync(SNAPSHOT_PATH, actual);
    console.log(`updated ${SNAPSHOT_PATH}`);
    return;
  }
  assert.ok(
    existsSync(SNAPSHOT_PATH),
    `${SNAPSHOT_PATH} is missing; create it deliberately with UPDATE_SNAPSHOTS=1`,
  );
  assert.equal(
    actual,
    readFileSync(SNAPSHOT_PATH, "utf8"),
    "the event log differs from the golden file; if the change is intended, rerun with UPDATE_SNAPSHOTS=1 and review the diff",
  );
});
