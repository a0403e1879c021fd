"""Reading the deployment files the way Docker would, so the tests can run what they describe.

* ``compose()``: docker-compose.yml with YAML merge keys resolved and ``${VAR:-default}``
  interpolated (against an empty environment: what a fresh ``docker compose up`` sees).
* ``dockerfile()``: the Dockerfile's stages and instructions, line continuations joined.
* ``image_command()``: what a compose service runs — the image's ENTRYPOINT plus the service's
  ``command`` (or the image's CMD).
* ``render_nginx()``: the nginx template as the nginx image renders it (envsubst of the
  variables its environment defines).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
NGINX_TEMPLATES = REPO / "deploy/nginx/templates"
NGINX_TEMPLATE = NGINX_TEMPLATES / "admission-service.conf.template"
# The token docker-compose.yml's default configuration accepts (tenant "demo").
DEMO_TOKEN = "demo-token-change-me"
DEMO_TENANT = "demo"
REPLICAS = ("service-a", "service-b")

_VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?-)([^}]*))?\}|\$(\w+)")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``${VAR}``, ``$VAR``, ``${VAR:-default}``, ``${VAR-default}``,
    ``$$`` for a literal ``$``."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, default = match.group(2), match.group(3) or ""
        if operator == ":-":
            return env.get(name) or default
        if operator == "-":
            return env.get(name, default)
        return env.get(name, "")

    return _VARIABLE.sub(replace, value)


def _interpolated(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolated(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _interpolated(value, env) for key, value in node.items()}
    return node


def compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    document = _interpolated(document, env or {})
    for service in document["services"].values():
        environment = service.get("environment", {})
        if isinstance(environment, list):  # the KEY=VALUE list form
            environment = dict(item.split("=", 1) for item in environment)
        service["environment"] = {key: str(value) for key, value in environment.items()}
    result: dict[str, Any] = document
    return result


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [argument for kw, argument in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def dockerfile(path: Path = DOCKERFILE) -> list[Stage]:
    """The stages, each with its instructions (keyword upper-cased, argument as written)."""
    lines: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, argument = line.partition(" ")
        keyword, argument = keyword.upper(), argument.strip()
        if keyword == "ARG" and not stages:
            arg, _, default = argument.partition("=")
            args[arg] = default
        elif keyword == "FROM":
            words = interpolate(argument, args).split()
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], stage))
        else:
            stages[-1].instructions.append((keyword, argument))
    return stages


def exec_form(argument: str) -> list[str]:
    """A JSON-array (exec form) ENTRYPOINT, CMD or HEALTHCHECK command."""
    value = json.loads(argument)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), argument
    return value


def image_command(service: Mapping[str, Any], stages: list[Stage] | None = None) -> list[str]:
    """What the container of a compose service built from the Dockerfile runs."""
    final = (stages or dockerfile())[-1]
    entrypoint = final.last("ENTRYPOINT")
    command = service.get("command")
    if command is None:
        cmd = final.last("CMD")
        command = exec_form(cmd) if cmd else []
    elif isinstance(command, str):
        command = command.split()
    return (exec_form(entrypoint) if entrypoint else []) + list(command)


def image_env(stages: list[Stage] | None = None) -> dict[str, str]:
    """The ``ENV`` the final stage sets (``KEY=VALUE`` pairs; ``$PATH``-style references are
    left as written)."""
    env: dict[str, str] = {}
    for argument in (stages or dockerfile())[-1].all("ENV"):
        for pair in argument.split():
            key, sep, value = pair.partition("=")
            if sep:
                env[key] = value
    return env


def healthcheck_command(service: Mapping[str, Any]) -> list[str]:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", "the health check runs a command, not a shell line"
    return list(test[1:])


def render_nginx(env: Mapping[str, str], template: Path = NGINX_TEMPLATE) -> str:
    """envsubst as the nginx image runs it: only ``${NAME}`` of defined variables."""
    text = template.read_text()
    for name, value in env.items():
        text = text.replace("${" + name + "}", value)
    return text
