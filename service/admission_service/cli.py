"""``admission-service``: run the service, migrate its database, inspect a session, probe it.

    admission-service serve                       # configuration from PAS_* / DATABASE_URL
    admission-service migrate                     # alembic upgrade head (and grants), then exit
    admission-service inspect SESSION_ID [--target HOST:PORT] [--wire FORMAT] [--token T]
                      [--trajectory]
    admission-service health [--target HOST:PORT] # exit 0 when grpc.health.v1 says SERVING
    admission-service token TENANT [--stdin]      # a bearer token and its PAS_AUTH_TOKENS entry

``inspect`` and ``health`` take ``--tls-ca`` (and ``--tls-cert``/``--tls-key`` for mTLS) to
reach a TLS listener; ``inspect`` sends ``--token`` (default ``PAS_TOKEN``) as a bearer token.

Exit status: 0 on success, 1 when the work failed, 2 for bad usage or configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from promptadmission import Trajectory
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import admission_service_pb2_grpc as api_grpc
from promptadmission.v1 import session_pb2 as pb

from admission_service.api.tenancy import hash_token
from admission_service.config import DEFAULT_LISTEN, ConfigError, Settings
from admission_service.storage.embedded import EmbeddedPostgresError
from admission_service.telemetry.logs import configure_logging
from admission_service.trajectory_text import (
    format_entries,
    trajectory_footer,
    trajectory_heading,
)

PROG = "admission-service"
WIRE_FORMATS = {
    "neutral": pb.WIRE_FORMAT_NEUTRAL,
    "openai_chat": pb.WIRE_FORMAT_OPENAI_CHAT,
    "openai_responses": pb.WIRE_FORMAT_OPENAI_RESPONSES,
    "anthropic_messages": pb.WIRE_FORMAT_ANTHROPIC_MESSAGES,
}
PREVIEW_CHARS = 80


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="The Prompt Admission Service.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "serve",
        help="serve gRPC until SIGTERM/SIGINT (configured by PAS_* and DATABASE_URL)",
        description="Serve gRPC until SIGTERM or SIGINT. Without DATABASE_URL an embedded "
        "PostgreSQL is started in PAS_DATA_DIR. See admission_service.config for every setting.",
    )
    commands.add_parser(
        "migrate",
        help="upgrade the database schema to the latest migration, then exit",
        description="Run the Alembic migrations (upgrade head) on DATABASE_URL, or on the "
        "embedded PostgreSQL in PAS_DATA_DIR when DATABASE_URL is unset; then, with "
        "PAS_DB_APP_ROLE, grant that role the data privileges the service needs.",
    )
    inspect = commands.add_parser(
        "inspect",
        help="show what the model sees in a session, and why",
        description="Call Inspect on a running service and print the session for an operator.",
    )
    inspect.add_argument("session_id", metavar="SESSION_ID")
    inspect.add_argument(
        "--wire",
        choices=sorted(WIRE_FORMATS),
        default="neutral",
        help="also print the derived request's provider body in this format",
    )
    inspect.add_argument(
        "--ledger", type=int, default=10, metavar="N", help="ledger rows to show (default 10)"
    )
    inspect.add_argument(
        "--trajectory",
        action="store_true",
        help="print the trajectory instead: every request with the prompt it saw and its change",
    )
    inspect.add_argument(
        "--token",
        default=os.environ.get("PAS_TOKEN") or None,
        help="bearer token to send (default: PAS_TOKEN)",
    )
    _add_client_arguments(inspect, timeout=10)
    health = commands.add_parser(
        "health",
        help="check a running service's grpc.health.v1 status (for container health checks)",
        description="Call grpc.health.v1.Health/Check; exit 0 when the status is SERVING, 1 "
        "otherwise (not serving, unreachable, or no answer within --timeout).",
    )
    health.add_argument(
        "--service",
        default="",
        help="the service name to check (default: the server as a whole)",
    )
    _add_client_arguments(health, timeout=3)
    token = commands.add_parser(
        "token",
        help="make a bearer token for a tenant and print its PAS_AUTH_TOKENS entry",
        description="Print a new random bearer token (give it to the tenant's clients) and the "
        "PAS_AUTH_TOKENS entry holding only its SHA-256 digest. With --stdin, hash a token read "
        "from standard input instead and print just the entry.",
    )
    token.add_argument("tenant", metavar="TENANT")
    token.add_argument("--stdin", action="store_true", help="hash the token read from stdin")
    return parser


def _add_client_arguments(parser: argparse.ArgumentParser, *, timeout: int) -> None:
    """What a command that calls a running service needs: its address, the call deadline
    (``timeout`` seconds by default) and the channel's TLS files."""
    parser.add_argument(
        "--target",
        metavar="HOST:PORT",
        help=f"the service's address (default: PAS_LISTEN, else {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(timeout),
        help=f"call deadline in seconds (default {timeout})",
    )
    parser.add_argument("--tls-ca", type=Path, metavar="PEM", help="TLS: trust this CA bundle")
    parser.add_argument("--tls-cert", type=Path, metavar="PEM", help="mTLS: client certificate")
    parser.add_argument("--tls-key", type=Path, metavar="PEM", help="mTLS: client private key")
    parser.add_argument(
        "--tls-server-name", metavar="NAME", help="TLS: the name the server certificate is for"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "inspect":
            return _inspect(args, sys.stdout)
        if args.command == "health":
            return _health(args)
        if args.command == "token":
            return _token(args, sys.stdin, sys.stdout)
        settings = Settings.from_env()
        configure_logging(settings.log_level, settings.log_format)
        if args.command == "migrate":
            return _migrate(settings)
        return _serve(settings)
    except ConfigError as exc:
        print(f"{PROG}: configuration error: {exc}", file=sys.stderr)
        return 2
    except EmbeddedPostgresError as exc:
        print(f"{PROG}: embedded PostgreSQL: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        # Imported here: `health` and `token` start faster without SQLAlchemy.
        from admission_service.storage.engine import DatabaseEncodingError
        from admission_service.storage.failures import unreachable_cause

        if isinstance(exc, DatabaseEncodingError):
            print(f"{PROG}: configuration error: {exc}", file=sys.stderr)
            return 2
        if (cause := unreachable_cause(exc)) is None:
            raise
        # The driver's own message says which server could not be reached and why; the
        # SQLAlchemy wrapper would add the statement, which an operator does not need.
        print(f"{PROG}: database unavailable: {str(cause).strip()}", file=sys.stderr)
        return 1


def _serve(settings: Settings) -> int:
    from admission_service.api.workers import serve_workers

    settings.require_authenticated_listener()  # before any worker starts: exit 2, once

    return serve_workers(settings)


def _migrate(settings: Settings) -> int:
    from admission_service.storage.engine import run_migrations

    url = settings.resolve_database_url()
    run_migrations(url)
    print("database schema is at the latest migration")
    if settings.db_app_role is not None:
        from admission_service.storage.privileges import UnknownRole, grant_data_privileges

        try:
            tables = grant_data_privileges(url, settings.db_app_role)
        except UnknownRole as exc:
            raise ConfigError(str(exc)) from None
        print(f"role {settings.db_app_role} may read and write the rows of {len(tables)} tables")
    return 0


# ---- inspect ------------------------------------------------------------------------------


def _default_target() -> str:
    listen = os.environ.get("PAS_LISTEN", "").strip() or DEFAULT_LISTEN
    host, _, port = listen.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


def _channel(args: argparse.Namespace, target: str) -> grpc.Channel:
    """A channel to ``target``: TLS when ``--tls-ca`` (or a client certificate) is given."""
    if args.tls_ca is None and args.tls_cert is None:
        return grpc.insecure_channel(target)
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    try:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=args.tls_ca.read_bytes() if args.tls_ca else None,
            private_key=args.tls_key.read_bytes() if args.tls_key else None,
            certificate_chain=args.tls_cert.read_bytes() if args.tls_cert else None,
        )
    except OSError as exc:
        raise ConfigError(f"cannot read a TLS file: {exc}") from exc
    options = []
    if args.tls_server_name:
        options.append(("grpc.ssl_target_name_override", args.tls_server_name))
    return grpc.secure_channel(target, credentials, options=options)


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    target = args.target or _default_target()
    # An operator sees both: each message, and the body the harness posts.
    request = api.InspectRequest(
        session_id=args.session_id,
        wire_format=WIRE_FORMATS[args.wire],
        content=pb.REQUEST_CONTENT_BOTH,
    )
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else None
    with _channel(args, target) as channel:
        stub = api_grpc.AdmissionServiceStub(channel)
        try:
            if args.trajectory:
                _trajectory(stub, args, metadata, out)
                return 0
            response = stub.Inspect(request, timeout=args.timeout, metadata=metadata)
        except grpc.RpcError as exc:
            print(f"{PROG}: inspect failed: {_describe_rpc_error(exc)}", file=sys.stderr)
            return 1
    out.write(format_inspect(response, ledger_rows=args.ledger))
    return 0


def _trajectory(
    stub: api_grpc.AdmissionServiceStub,
    args: argparse.Namespace,
    metadata: tuple[tuple[str, str], ...] | None,
    out: TextIO,
) -> None:
    """Every page of ListTrajectory, written as it arrives: the pages name prompts and tool
    sets by version and carry each distinct one once, and ``contents`` keeps each once."""
    out.write(trajectory_heading(args.session_id))
    contents = Trajectory()
    requests = 0
    token = ""
    while True:
        page = stub.ListTrajectory(
            api.ListTrajectoryRequest(session_id=args.session_id, page_size=1000, page_token=token),
            timeout=args.timeout,
            metadata=metadata,
        )
        contents.add_contents(page)
        out.write(format_entries(contents, page.entries))
        requests += len(page.entries)
        if not (token := page.next_page_token):
            out.write(trajectory_footer(requests))
            return


def _health(args: argparse.Namespace) -> int:
    target = args.target or _default_target()
    with _channel(args, target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            print(f"{PROG}: health check failed: {_describe_rpc_error(exc)}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(f"{target} {args.service or '(server)'}: {status}")
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def _token(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    token = stdin.read().strip() if args.stdin else secrets.token_urlsafe(32)  # 256 bits
    if not token:
        raise ConfigError("no token on standard input")
    entry = f"{args.tenant}={hash_token(token)}"
    Settings.from_env({"PAS_AUTH_TOKENS": entry})  # the tenant id must be one the service takes
    if args.stdin:
        out.write(f"{entry}\n")
    else:
        out.write(f"token: {token}\nPAS_AUTH_TOKENS entry: {entry}\n")
    return 0


def _describe_rpc_error(exc: grpc.RpcError) -> str:
    assert isinstance(exc, grpc.Call)
    text = f"{exc.code().name}: {exc.details()}"
    try:
        status = rpc_status.from_call(exc)
    except ValueError:
        status = None
    if status is not None:
        from google.rpc import error_details_pb2  # type: ignore[import-untyped]

        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                text += f" ({info.reason})"
    return text


def _quote(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line, control characters escaped, cut to ``limit`` characters."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return json.dumps(cut, ensure_ascii=False)


def _block_preview(block: pb.ContentBlock) -> str:
    which = block.WhichOneof("block")
    if which == "text":
        return block.text.text
    if which == "image":
        return f"[image {block.image.uri}]"
    if which == "reasoning":
        return f"[reasoning] {block.reasoning.text}"
    if which == "redacted_reasoning":
        return f"[redacted reasoning {block.redacted_reasoning.provider}]"
    if which == "reasoning_item":
        item = block.reasoning_item
        return f"[reasoning item {item.id}] {' '.join(item.summary)}"
    if which == "tool_call":
        call = block.tool_call
        return f"[tool_call {call.name} {call.call_id}] {call.arguments_json}"
    if which == "tool_result":
        result = block.tool_result
        inner = " ".join(_block_preview(part) for part in result.content)
        error = " error" if result.is_error else ""
        return f"[tool_result {result.call_id}{error}] {inner}"
    return "[empty block]"


def _short(name: str, prefix: str) -> str:
    """An enum value's name without its prefix, lower case (``HEADER_REASON_INITIAL`` ->
    ``initial``)."""
    return name.removeprefix(prefix).lower()


def _header(log: pb.HeaderLog) -> str:
    series = ", starts series" if log.starts_series else ""
    reason = _short(pb.HeaderReason.Name(log.reason), "HEADER_REASON_")
    tools = ", ".join(tool.name for tool in log.header.tools) or "no tools"
    return (
        f"seq {log.seq} ({reason}{series}): {log.header.provider}/{log.header.model}, "
        f"{len(log.header.tools)} tools ({tools})"
    )


def _context(log: pb.ContextLog) -> str:
    context = log.context
    window = context.context_window or "undeclared"
    update = _short(
        pb.SystemPromptUpdate.Name(context.system_prompt_update), "SYSTEM_PROMPT_UPDATE_"
    ).replace("_", "-")
    return (
        f"seq {log.seq}: {context.provider}/{context.model}, context window {window}, "
        f"system prompt update {update}"
    )


def format_inspect(response: api.InspectResponse, *, ledger_rows: int = 10) -> str:
    """The operator's view of an Inspect response, as text."""
    lines: list[str] = []
    add = lines.append
    session = response.session
    add(f"session {session.session_id}")
    add(
        f"  revision {response.revision}, {session.event_count} events, "
        f"replace generation {session.replace_generation}"
    )
    add(
        f"  created {session.create_time.ToJsonString()}, "
        f"updated {session.update_time.ToJsonString()}"
    )

    prompt = response.effective_prompt
    location = _short(pb.PromptLocation.Name(prompt.location), "PROMPT_LOCATION_").replace("_", "-")
    add("")
    if prompt.location == pb.PROMPT_LOCATION_NONE:
        add("effective prompt: none")
    else:
        add(f"effective prompt: seq {prompt.seq}, {location}, {len(prompt.text)} chars")
        add(f"  {_quote(prompt.text)}")

    add("")
    add(f"system nodes ({len(response.system_nodes)}):")
    if response.system_nodes:
        add(f"  {'seq':>6}  {'turn/step':>9}  {'update':6}  text")
    for node in response.system_nodes:
        flag = "update" if node.update else "-"
        text = _quote(node.text) if node.text else "(empty)"
        add(f"  {node.seq:>6}  {f'{node.turn}/{node.step}':>9}  {flag:6}  {text}")

    tokens = response.breakdown
    add("")
    add(
        f"tokens: system {tokens.system_tokens}, tools {tokens.tools_tokens}, "
        f"messages {tokens.message_tokens}, total {tokens.total_tokens} ({tokens.tokenizer})"
    )
    if tokens.calibration_requests:
        add(
            f"calibration: observed / estimated input {tokens.observed_input_ratio:.3f} "
            f"over {tokens.calibration_requests} request(s)"
        )

    series = response.series
    add("")
    last_generation = (
        str(series.last_request_generation)
        if series.HasField("last_request_generation")
        else "none (no request yet)"
    )
    add(
        f"series: replace generation {series.replace_generation}, at last request {last_generation}"
    )
    add(
        "  last header: "
        + (_header(series.last_header) if series.HasField("last_header") else "none")
    )
    add(
        "  last context: "
        + (_context(series.last_context) if series.HasField("last_context") else "none")
    )

    ledger = list(response.ledger)[-ledger_rows:] if ledger_rows > 0 else []
    add("")
    add(f"cache ledger (last {len(ledger)} of {len(response.ledger)}):")
    if ledger:
        add(
            f"  {'request':>7}  {'admission':12}  {'attempt':>7}  {'reused/total msgs':>17}  "
            f"{'reused/total tokens':>19}  {'divergence':16}  {'cache read':>10}  {'drift':>6}"
        )
    for entry in ledger:
        forecast = entry.forecast
        reason = _short(pb.DivergenceReason.Name(forecast.divergence_reason), "DIVERGENCE_REASON_")
        observed = str(entry.observed.cache_read_tokens) if entry.HasField("observed") else "-"
        drift = str(entry.drift_tokens) if entry.HasField("observed") else "-"
        admission = entry.admission_id[:12]
        add(
            f"  {entry.request_index:>7}  {admission:12}  {entry.attempt:>7}  "
            f"{f'{forecast.reused_messages}/{forecast.total_messages}':>17}  "
            f"{f'{forecast.reused_tokens}/{forecast.total_tokens}':>19}  "
            f"{reason:16}  {observed:>10}  {drift:>6}"
        )

    request = response.request
    wire = _short(pb.WireFormat.Name(request.wire_format), "WIRE_FORMAT_")
    add("")
    add(f"derived request ({len(request.messages)} messages, {len(request.tools)} tools, {wire}):")
    for index, message in enumerate(request.messages):
        role = _short(pb.MessageRole.Name(message.role), "MESSAGE_ROLE_")
        text = " ".join(_block_preview(block) for block in message.content)
        add(f"  [{index}] {role:9}  {_quote(text)}")
    if request.body_json:
        add("")
        add(f"{wire} body:")
        body = json.dumps(json.loads(request.body_json), indent=2, ensure_ascii=False)
        lines.extend(f"  {line}" for line in body.splitlines())
    if request.omitted:
        add("")
        add(f"{wire} body leaves out:")
        lines.extend(f"  {omitted.field}: {omitted.why}" for omitted in request.omitted)
    if request.HasField("render_error"):
        add("")
        add(f"{wire} body: cannot be rendered: {request.render_error.message}")
    return "\n".join(lines) + "\n"
