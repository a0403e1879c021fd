/**
 * Starts the real Prompt Admission Service (the Python `admission-service serve`) for the tests,
 * on a free loopback port, and waits until it answers.
 *
 * - The command is `$PAS_SERVICE_BIN` (default: the repository's `.venv/bin/admission-service`,
 *   which `make install` creates).
 * - With `DATABASE_URL` set, the server runs on a throwaway database created on that server
 *   (and dropped afterwards) with the service's own Python; without it, the service starts its
 *   embedded PostgreSQL in a temporary data directory.
 */
import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { createAdmissionClient } from "../src/index.js";

/** The repository root (this file runs from clients/typescript/dist/test/). */
export const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

const START_TIMEOUT_MS = 60_000;

export interface RunningServer {
  /** `http://127.0.0.1:<port>`, the `baseUrl` for `createAdmissionClient`. */
  baseUrl: string;
  stop(): Promise<void>;
}

function serviceBin(): string {
  const bin = process.env["PAS_SERVICE_BIN"] ?? join(REPO_ROOT, ".venv/bin/admission-service");
  if (!existsSync(bin)) {
    throw new Error(`${bin} does not exist: run \`make install\` or set PAS_SERVICE_BIN`);
  }
  return bin;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

// CREATE/DROP DATABASE through the service's own interpreter (psycopg is one of its
// dependencies), so the tests need no PostgreSQL driver of their own.
const DATABASE_ADMIN = `
import sys
import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

action, url, name = sys.argv[1:4]
server = make_url(url).set(drivername="postgresql")
with psycopg.connect(server.render_as_string(hide_password=False), autocommit=True) as conn:
    if action == "create":
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    else:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
print(server.set(database=name).render_as_string(hide_password=False))
`;

function databaseAdmin(python: string, action: "create" | "drop", url: string, name: string): string {
  const result = spawnSync(python, ["-c", DATABASE_ADMIN, action, url, name], {
    encoding: "utf8",
  });
  if (result.status !== 0) {
    throw new Error(`could not ${action} database ${name}: ${result.stderr}`);
  }
  return result.stdout.trim();
}

async function waitUntilServing(baseUrl: string, child: ChildProcess, output: () => string) {
  const client = createAdmissionClient({ baseUrl, timeoutMs: 1_000, retries: 0 });
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) {
      throw new Error(`the server exited with ${child.exitCode}:\n${output()}`);
    }
    try {
      await client.listSessions({ pageSize: 1 });
      return;
    } catch (err) {
      if (Date.now() > deadline) {
        throw new Error(`the server did not start in time: ${String(err)}\n${output()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

/** Starts a server; `stop()` shuts it down (SIGTERM) and removes what it created. */
export async function startServer(): Promise<RunningServer> {
  const bin = serviceBin();
  const python = join(dirname(bin), "python");
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PAS_LISTEN: `127.0.0.1:${port}`,
    PAS_LOG_LEVEL: "WARNING",
    PAS_SHUTDOWN_GRACE_SECONDS: "1",
  };
  const cleanups: (() => void)[] = [];
  const configured = process.env["DATABASE_URL"]?.trim();
  if (configured) {
    const name = `pas_ts_test_${randomBytes(6).toString("hex")}`;
    env["DATABASE_URL"] = databaseAdmin(python, "create", configured, name);
    cleanups.push(() => databaseAdmin(python, "drop", configured, name));
  } else {
    delete env["DATABASE_URL"];
    const dataDir = mkdtempSync(join(tmpdir(), "pas-ts-test-"));
    env["PAS_DATA_DIR"] = dataDir;
    cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  }

  let output = "";
  const child = spawn(bin, ["serve"], { env, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const cleanup = () => {
    for (const step of cleanups.reverse()) {
      step();
    }
  };

  const baseUrl = `http://127.0.0.1:${port}`;
  try {
    await waitUntilServing(baseUrl, child, () => output);
  } catch (err) {
    child.kill("SIGKILL");
    await exited;
    cleanup();
    throw err;
  }
  return {
    baseUrl,
    async stop() {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
      cleanup();
    },
  };
}
