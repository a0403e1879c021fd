"""The service as a user installs it: the wheel built from the files the image copies
(``pyproject.toml``, ``README.md``, ``service/``, ``migrations/``), installed with the Python
client into a fresh virtual environment, migrates an empty PostgreSQL database from outside any
checkout. ``migrations/`` lives at the repository's top level and reaches the wheel only through
``pyproject.toml``'s package mapping; this is the test that fails when it does not.

The fresh environment gets its dependencies from pip's cache or the index, as ``pip install``
does for a user (about half a minute with a warm cache)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from admission_service.storage.engine import alembic_config, libpq_url
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy import pool, text

REPO_ROOT = Path(__file__).resolve().parents[2]
# What the Dockerfile copies to build the image's wheel.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "service", "migrations")
BUILD_LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
PIP_TIMEOUT = 600

pytestmark = pytest.mark.slow


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _copy(sources: tuple[str, ...], into: Path) -> Path:
    """The sources copied out of the checkout, so that building writes nothing into it."""
    into.mkdir()
    for name in sources:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=BUILD_LEFTOVERS)
        else:
            shutil.copy2(source, into / name)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The service's wheel, built by pip from a copy of the image's sources."""
    root = tmp_path_factory.mktemp("wheel")
    sources = _copy(WHEEL_SOURCES, root / "src")
    # The build backend (setuptools) is this environment's: no isolated download.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(root / "dist"),
            str(sources),
        ],
        cwd=root,
    )
    (built,) = (root / "dist").glob("prompt_admission_service-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment (not this one's packages) holding the wheel and the
    client; its bin/ directory."""
    root = tmp_path_factory.mktemp("installed")
    client = root / "client"
    shutil.copytree(REPO_ROOT / "clients" / "python", client, ignore=BUILD_LEFTOVERS)
    _run([sys.executable, "-m", "venv", str(root / "venv")], cwd=root)
    bin_dir = root / "venv" / "bin"
    _run([str(bin_dir / "pip"), "install", "--quiet", str(client), str(wheel)], cwd=root)
    return bin_dir


def test_the_wheel_holds_every_source_file_and_the_migrations(wheel: Path) -> None:
    """The listed packages in pyproject.toml cover every file of the sources: nothing is left
    behind when a package or a data file is added, and migrations/ lands in the package."""
    expected = {
        str(path.relative_to(REPO_ROOT / "service"))
        for path in (REPO_ROOT / "service" / "admission_service").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    } | {
        "admission_service/migrations/" + str(path.relative_to(REPO_ROOT / "migrations"))
        for path in (REPO_ROOT / "migrations").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name for name in archive.namelist() if ".dist-info/" not in name}
    assert packaged == expected
    assert "admission_service/migrations/versions/0001_initial_schema.py" in packaged


def test_the_installed_wheel_migrates_an_empty_database(
    installed: Path, empty_database_url: str, tmp_path: Path
) -> None:
    # From a directory outside the checkout: only the fresh environment's files are importable.
    located = _run(
        [
            str(installed / "python"),
            "-c",
            "import admission_service.migrations as m; print(m.__file__)",
        ],
        cwd=tmp_path,
    )
    assert Path(located.strip()).is_relative_to(installed.parent), located

    out = _run(
        [str(installed / "admission-service"), "migrate"],
        cwd=tmp_path,
        env={"DATABASE_URL": libpq_url(empty_database_url)},
    )
    assert "database schema is at the latest migration" in out

    head = ScriptDirectory.from_config(alembic_config(empty_database_url)).get_current_head()
    engine = create_sync_engine(empty_database_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
            sessions = connection.execute(text("SELECT count(*) FROM sessions")).scalar()
    finally:
        engine.dispose()
    assert (version, sessions) == (head, 0)
