"""The TypeScript client as another project uses it: packed with `npm pack` (its `prepare`
script builds `dist`) and installed from the tarball, or installed from its directory, into a
fresh project that type-checks against it and calls the real server.

The package is built from a copy of its sources (the checkout's `dist` stays as `make ts-test`
built it), with the pinned dependencies the checkout installed (`make ts-install`). The fresh
project gets the client's runtime dependencies from npm's cache or the registry.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import TYPESCRIPT

NPM_TIMEOUT = 300
PACKAGE_SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json")

# A consumer's module: ESM, strict TypeScript, the package's public names only.
CONSUMER = """\
import { Reason, createAdmissionClient, errorReason } from "@promptadmission/client";

const client = createAdmissionClient({ baseUrl: process.argv[2]!, retries: 0 });
const { session } = await client.createSession({});
const got = await client.getSession({ sessionId: session!.sessionId });
const reason = await client
  .getSession({ sessionId: "no-such-session" })
  .then(() => "none", (err: unknown) => errorReason(err));
console.log(JSON.stringify({
  created: got.session?.sessionId === session?.sessionId,
  reason,
  known: reason === Reason.SESSION_NOT_FOUND,
}));
"""
CONSUMER_TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "skipLibCheck": True,  # check this module against the package's types, not node's
        "types": ["node"],
        "typeRoots": [str(TYPESCRIPT / "node_modules/@types")],
        "outDir": "out",
    },
    "include": ["main.ts"],
}


def run(command: list[str], cwd: Path) -> str:
    env = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def npm() -> str:
    npm = shutil.which("npm")
    installed = (TYPESCRIPT / "node_modules/.bin/tsc").exists()
    if npm is None or not installed:
        missing = "npm is not installed" if npm is None else "run `make ts-install`"
        if os.environ.get("PAS_REQUIRE_TYPESCRIPT") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    return npm


@pytest.fixture(scope="module")
def package_copy(npm: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's sources as a fresh clone has them (no dist), with its pinned tools."""
    copy = tmp_path_factory.mktemp("package") / "client"
    copy.mkdir()
    for name in PACKAGE_SOURCES:
        shutil.copy2(TYPESCRIPT / name, copy / name)
    shutil.copytree(TYPESCRIPT / "src", copy / "src")
    (copy / "node_modules").symlink_to(TYPESCRIPT / "node_modules")
    return copy


def consumer_project(directory: Path, npm: str, dependency: str) -> Path:
    directory.mkdir()
    manifest = {"name": "consumer", "version": "1.0.0", "private": True, "type": "module"}
    (directory / "package.json").write_text(json.dumps(manifest))
    run([npm, "install", "--prefer-offline", dependency], directory)
    (directory / "main.ts").write_text(CONSUMER)
    (directory / "tsconfig.json").write_text(json.dumps(CONSUMER_TSCONFIG))
    run([str(TYPESCRIPT / "node_modules/.bin/tsc"), "-p", "tsconfig.json"], directory)
    return directory / "out/main.js"


def call_server(main: Path, server_target: str) -> dict[str, object]:
    node = shutil.which("node")
    assert node is not None
    output = run([node, str(main), f"http://{server_target}"], main.parent)
    result: dict[str, object] = json.loads(output)
    return result


EXPECTED = {"created": True, "reason": "SESSION_NOT_FOUND", "known": True}


def test_a_packed_tarball_installs_and_calls_the_server(
    npm: str, package_copy: Path, server_target: str, tmp_path: Path
) -> None:
    packed = json.loads(
        run([npm, "pack", "--json", "--pack-destination", str(tmp_path)], package_copy)
    )
    [tarball] = packed
    files = {entry["path"] for entry in tarball["files"]}
    assert {"dist/src/index.js", "dist/src/index.d.ts", "package.json"} <= files
    assert not any(path.startswith(("src/", "dist/test/", "node_modules/")) for path in files)

    main = consumer_project(tmp_path / "consumer", npm, str(tmp_path / tarball["filename"]))
    assert call_server(main, server_target) == EXPECTED


def test_a_directory_installs_and_calls_the_server(
    npm: str, package_copy: Path, server_target: str, tmp_path: Path
) -> None:
    """`npm install <path>` links the directory and runs its `prepare`, which builds `dist`."""
    shutil.rmtree(package_copy / "dist", ignore_errors=True)
    main = consumer_project(tmp_path / "consumer", npm, str(package_copy))
    assert (package_copy / "dist/src/index.js").exists()
    assert call_server(main, server_target) == EXPECTED
