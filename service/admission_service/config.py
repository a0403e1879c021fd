"""Service settings, read once from the environment at start.

| Variable | Default | Meaning |
|---|---|---|
| ``PAS_LISTEN`` | ``127.0.0.1:50051`` | gRPC listen address (``host:port``; port 0 picks one) |
| ``DATABASE_URL`` | unset | ``postgresql://…``; unset starts an embedded PostgreSQL |
| ``PAS_DATA_DIR`` | ``.data/postgres`` | the embedded PostgreSQL's data directory |
| ``PAS_EMBEDDED_PG_PORT`` | a free port | the embedded PostgreSQL's port |
| ``PAS_MIGRATE_ON_START`` | ``true`` | run ``alembic upgrade head`` before serving (when behind) |
| ``PAS_MODEL_CATALOG`` | built-in | path to a YAML model catalog replacing the built-in one |
| ``PAS_DB_POOL_SIZE`` | ``10`` | database connections kept open |
| ``PAS_DB_MAX_OVERFLOW`` | ``10`` | extra connections allowed under load |
| ``PAS_DB_PREPARED_STATEMENTS`` | ``true`` on the embedded PostgreSQL, else ``false`` | let
  psycopg prepare a statement on a connection after its fifth run (PostgreSQL then parses and
  plans it once: 0.8 ms less PostgreSQL CPU per step, docs/BENCHMARKS.md): for a direct
  connection, or a pooler that keeps prepared statements (PgBouncer ≥ 1.21 with
  ``max_prepared_statements``); off, nothing outlives a transaction (any transaction-mode
  pooler). With ``DATABASE_URL`` the service cannot tell what is in between: off unless set |
| ``PAS_SESSION_CACHE_BYTES`` | ``16777216`` (16 MiB) | each worker's cache of the sessions
  it wrote (``storage/session_cache.py``): a step on a cached session is one round trip to
  PostgreSQL, checked by the session row's version; ``0`` turns it off (every step reads the
  session first: two round trips). Balancer affinity on the ``x-pas-session`` header keeps a
  session on one worker (docs/SCALING.md); correctness never depends on it |
| ``PAS_HELD_FRAME_BYTES`` | ``16777216`` (16 MiB) | each worker's copies of the large node
  frames (16 KiB or more: tool outputs, long documents, a long session's sealed chunks) its
  commits wrote or read FULL
  (``storage/held_frames.py``): the next FULL read of such a session fetches only
  the rest, when the session row is still at the version the copies were left at (checked by
  the read itself); past the bound the least recently used session lets go of its largest
  copies first; ``0`` turns it off |
| ``PAS_HELD_BODY_BYTES`` | ``16777216`` (16 MiB) | each worker's rendered provider bodies (64
  KiB or more) of its sessions' last requests (``app/held_bodies.py``): the next FULL body of
  such a session (a response carrying the body alone) is made from the held one and the
  messages after it, reading and rendering only those, when it is the body of the session's
  previous request (its digest) and nothing before that request's end was shadowed since;
  least recently used first out; ``0`` turns it off |
| ``PAS_DB_APP_ROLE`` | unset | ``migrate`` grants this existing role the data privileges the
  service needs (no DDL), for replicas that connect as it |
| ``PAS_HEALTH_PROBE_SECONDS`` | ``2`` | how often the server checks the database for its health
  status (NOT_SERVING while PostgreSQL does not answer); ``0`` turns the probe off |
| ``PAS_SHUTDOWN_GRACE_SECONDS`` | ``10`` | how long in-flight RPCs may run after SIGTERM |
| ``PAS_SHUTDOWN_OVERRUN_SECONDS`` | ``30`` | how long a stop may run past the grace before
  it counts as stuck: the worker writes every stack to the log and exits 70
  (``api/shutdown_watchdog.py``). The stop's own steps are bounded within it: the pool's
  close, the metrics thread's join (5 s), the span exporter's last flush (OTLP's 10 s) |
| ``PAS_WORKERS`` | usable cores | ``serve`` worker processes sharing the port (``SO_REUSEPORT``),
  each with its own event loop and its own pool of ``PAS_DB_POOL_SIZE`` (+ overflow)
  connections; metrics on ``PAS_METRICS_LISTEN``'s port + worker index (docs/SCALING.md) |
| ``PAS_EVENT_LOOP`` | ``uvloop`` | the event loop ``serve`` runs on: ``uvloop`` (libuv's; 17 to
  27 % less CPU per step) or ``asyncio`` (the standard library's) |
| ``PAS_TOKENIZER_PRELOAD`` | the catalog's families | route families (``openai``, ``anthropic``,
  ``deepseek``; comma or space separated, ``none`` for none) whose tokenizer ``serve`` loads
  before it starts its workers, so they share its memory and no first Admit waits for a load;
  another family still loads on its first request. Default: the families the model catalog
  names (``deepseek`` for the built-in one) |
| ``PAS_AUTH_TOKENS`` | unset | ``tenant=sha256:<hex>`` entries (comma or space separated): the
  hashed bearer tokens and their tenants (``admission-service token TENANT`` makes one) |
| ``PAS_AUTH_TOKENS_FILE`` | unset | a file of such entries, one per line, ``#`` comments; read
  again on SIGHUP and when it changes (a revoked token is refused from then on) |
| ``PAS_AUTH_TOKENS_WATCH_SECONDS`` | ``2`` | how often the tokens file is checked for changes
  (``0``: only on SIGHUP) |
| ``PAS_ALLOW_UNAUTHENTICATED`` | ``false`` | allow serving without tokens on a non-loopback
  address (every call then acts for ``PAS_DEFAULT_TENANT``), and starting on a
  ``PAS_AUTH_TOKENS_FILE`` that holds no token (unauthenticated until a reload finds some) |
| ``PAS_DEFAULT_TENANT`` | ``default`` | the tenant of every call when no tokens are configured |
| ``PAS_TLS_CERT_FILE``, ``PAS_TLS_KEY_FILE`` | unset | PEM certificate chain and key: serve TLS |
| ``PAS_TLS_CLIENT_CA_FILE`` | unset | PEM CA bundle: require client certificates it signed (mTLS) |
| ``PAS_MAX_RECEIVE_MESSAGE_BYTES`` | ``16777216`` (16 MiB) | largest request gRPC accepts |
| ``PAS_STREAM_STALL_SECONDS`` | ``30`` | how long a StreamAdmit or StreamReconcile chunk may
  wait for its caller to read before the stream is ended (UNAVAILABLE,
  ``RESPONSE_STREAM_STALLED``: the call committed, a retry with its request_id replays it), so a
  caller that stops reading cannot hold the response's memory |
| ``PAS_METRICS_LISTEN`` | unset | ``host:port`` of Prometheus ``/metrics``; unset: no endpoint |
| ``PAS_INSPECTOR_LISTEN`` | unset | ``host:port`` of the read-only operator inspector (web
  pages, the API's bearer tokens): a process of its own beside the workers; unset: none |
| ``PAS_INSPECTOR_ALLOWED_HOSTS`` | the listen host and ``localhost``, ``127.0.0.1``, ``::1`` |
  host names the inspector answers in ``Host`` (comma or space separated; ``*``: any); another
  ``Host`` is 421 (DNS rebinding). Set it to the names operators use with a wildcard listen |
| ``PAS_INSPECTOR_MAX_CONNECTIONS`` | ``128`` | open connections the inspector keeps; one more
  is answered 503 and closed at once |
| ``PAS_INSPECTOR_HEADER_TIMEOUT_SECONDS`` | ``10`` | time a connection has to send a request's
  complete headers, from its opening or its previous response (also the keep-alive idle
  timeout, and the TLS handshake's); then it is closed |
| ``PAS_INSPECTOR_BODY_TIMEOUT_SECONDS`` | ``5`` | the inspector reads no body: a request that
  announces one is refused (413) and its connection closed; what arrives meanwhile is read and
  dropped for at most this long |
| ``PAS_INSPECTOR_RENDER_THREADS`` | ``2`` | threads rendering pages in the inspector's process
  (further requests wait for one); its database pool has as many connections |
| ``PAS_INSPECTOR_NICE`` | ``10`` | the inspector process's nice increment (0-19): under CPU
  contention the API workers run first |
| ``PAS_LOG_LEVEL`` | ``INFO`` | ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL`` |
| ``PAS_LOG_FORMAT`` | ``json`` | ``json`` (one object per line) or ``text`` |
| ``PAS_LOG_PAYLOADS`` | ``false`` | also log request and response payloads — prompt and message
  text — at DEBUG (with ``PAS_LOG_LEVEL=DEBUG``); for debugging only |
| ``PAS_TRACING_EXPORTER`` | ``none`` | ``none``, ``console`` or ``otlp`` (``OTEL_*`` apply) |
| ``PAS_PAGE_TOKEN_KEYS`` | stored | secrets of at least 32 characters (comma or space
  separated) keying page and plan tokens: the first signs, all verify (rotation in three steps:
  ``app.page_tokens``). Unset: the random keys of the database's ``page_token_keys`` table
  (generated by the migrations), the same on every replica |
| ``PAS_REFLECTION`` | ``true`` | serve gRPC server reflection (``false`` on a public listener) |
| ``PAS_LIMIT_<NAME>`` | ``app.limits.Limits`` | a limit (``PAS_LIMIT_MAX_PROMPT_BYTES``, …) or
  session bound (``PAS_LIMIT_MAX_SESSION_SURFACE_BYTES``, …); the response bounds are
  ``PAS_LIMIT_MAX_RESPONSE_BYTES`` (a unary response's derived request, 4 MiB: what gRPC
  clients receive by default) and ``PAS_LIMIT_MAX_STREAMED_RESPONSE_BYTES`` (StreamAdmit's
  and StreamReconcile's, sent in chunks of 1 MiB: 1 GiB); ``PAS_LIMIT_MAX_STREAMING_BYTES``
  (2 GiB, at least the former) bounds the streamed responses one worker holds while sending
  them: one more is dropped before its first chunk (UNAVAILABLE, ``STREAMING_BYTES_EXHAUSTED``;
  a retry with its request_id replays it) |
| ``PAS_QUOTA_SESSIONS`` | ``0`` (off) | sessions per tenant (``app/quotas.py``) |
| ``PAS_QUOTA_STORED_BYTES`` | ``0`` (off) | event-log bytes per tenant |
| ``PAS_QUOTA_CONCURRENT_CALLS`` | ``0`` (off) | calls per tenant in progress on one replica |
| ``PAS_QUOTA_USAGE_REFRESH_SECONDS`` | ``5`` | how often a replica re-reads a tenant's
  stored bytes |
| ``PAS_IDEMPOTENCY_RETENTION_SECONDS`` | ``86400`` (24 h) | how long a ``request_id`` replays |
| ``PAS_IDEMPOTENCY_SWEEP_SECONDS`` | ``60`` | how often expired keys are swept (``0``: never) |

A request larger than ``PAS_MAX_RECEIVE_MESSAGE_BYTES`` is refused by gRPC itself
(RESOURCE_EXHAUSTED) before the service can name the offending field; keep it above the largest
request the ``PAS_LIMIT_*`` values allow in practice.

Without tokens there is no authentication; to keep that from reaching a network by accident, the
service then refuses to listen on anything but a loopback address unless
``PAS_ALLOW_UNAUTHENTICATED=true`` (checked by ``serve`` only: the other commands listen on
nothing).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from admission_service.app.limits import (
    HELD_BODY_BYTES,
    HELD_FRAME_BYTES,
    IDEMPOTENCY_RETENTION_SECONDS,
    IDEMPOTENCY_SWEEP_SECONDS,
    MIB,
    SESSION_CACHE_BYTES,
    STREAM_STALL_SECONDS,
    Limits,
    Quotas,
)
from admission_service.app.page_tokens import MIN_KEY_CHARS as PAGE_TOKEN_KEY_CHARS
from admission_service.telemetry.logs import LOG_FORMATS
from admission_service.telemetry.tracing import TRACING_EXPORTERS
from admission_service.token_hashes import is_token_hash

DEFAULT_LISTEN = "127.0.0.1:50051"
# The same as storage.engine.DEFAULT_DATA_DIR (a test checks): the storage modules pull in
# SQLAlchemy and Alembic, which commands like ``admission-service health`` do without.
DEFAULT_DATA_DIR = Path(".data/postgres")
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 16 * MIB
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LIMIT_PREFIX = "PAS_LIMIT_"
LOOPBACK_HOSTS = frozenset({"localhost", "[::1]", "::1"})
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_INF = float("inf")
T = TypeVar("T")
D = TypeVar("D")


class ConfigError(ValueError):
    """A setting is invalid; the service refuses to start and prints this message."""


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True, slots=True)
class InspectorSettings:
    """How the inspector's process serves (``PAS_INSPECTOR_*``; its address is ``Settings.
    inspector_listen``)."""

    # Host names answered (lower case, no port); empty: the listen host and loopback's names.
    allowed_hosts: tuple[str, ...] = ()
    max_connections: int = 128
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 5.0
    render_threads: int = 2
    nice: int = 10


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = DEFAULT_LISTEN
    database_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    embedded_pg_port: int | None = None
    migrate_on_start: bool = True
    model_catalog: Path | None = None
    db_pool_size: int = 10
    db_max_overflow: int = 10
    # None: on for the embedded PostgreSQL (a direct connection), off with DATABASE_URL.
    db_prepared_statements: bool | None = None
    session_cache_bytes: int = SESSION_CACHE_BYTES
    held_frame_bytes: int = HELD_FRAME_BYTES
    held_body_bytes: int = HELD_BODY_BYTES
    db_app_role: str | None = None
    health_probe_seconds: float = 2.0
    shutdown_grace_seconds: float = 10.0
    shutdown_overrun_seconds: float = 30.0
    default_tenant: str = "default"
    # sha256:<hex> of each bearer token -> its tenant; empty: no authentication.
    token_tenants: Mapping[str, str] = field(default_factory=dict)
    # Where token_tenants came from, read again on SIGHUP or when the file changes.
    auth_tokens: str = ""
    auth_tokens_file: Path | None = None
    auth_tokens_watch_seconds: float = 2.0
    allow_unauthenticated: bool = False
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES
    # The calls one connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS):
    # each holds its response until the caller reads it, so one connection that reads nothing
    # cannot pin more than this many. 128 is the compose nginx's own limit per connection.
    max_concurrent_streams: int = 128
    stream_stall_seconds: float = STREAM_STALL_SECONDS
    metrics_listen: str | None = None
    inspector_listen: str | None = None
    inspector: InspectorSettings = field(default_factory=InspectorSettings)
    log_level: str = "INFO"
    log_format: str = "json"
    log_payloads: bool = False
    tracing_exporter: str = "none"
    # serve's worker processes (api/workers.py): one per usable core unless PAS_WORKERS says.
    workers: int = field(default_factory=usable_cores)
    share_port: bool = False  # set by serve for its workers: bind the port with SO_REUSEPORT
    # The route families whose tokenizers serve loads before its workers start (tokenizers.py);
    # None: the families the model catalog names.
    tokenizer_preload: tuple[str, ...] | None = None
    reflection: bool = True
    event_loop: str = "uvloop"
    page_token_keys: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    quotas: Quotas = field(default_factory=Quotas)
    idempotency_retention_seconds: float = IDEMPOTENCY_RETENTION_SECONDS
    idempotency_sweep_seconds: float = IDEMPOTENCY_SWEEP_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default ``os.environ``); ``ConfigError`` names a bad one."""
        env = os.environ if env is None else env
        reader = _Reader(env)
        listen = reader.listen("PAS_LISTEN", DEFAULT_LISTEN)
        auth_tokens = reader.text("PAS_AUTH_TOKENS")
        auth_tokens_file = reader.file("PAS_AUTH_TOKENS_FILE")
        settings = cls(
            listen=listen,
            database_url=reader.database_url("DATABASE_URL"),
            data_dir=Path(reader.text("PAS_DATA_DIR") or DEFAULT_DATA_DIR),
            embedded_pg_port=reader.optional_port("PAS_EMBEDDED_PG_PORT"),
            migrate_on_start=reader.boolean("PAS_MIGRATE_ON_START", True),
            model_catalog=reader.path("PAS_MODEL_CATALOG"),
            db_pool_size=reader.integer("PAS_DB_POOL_SIZE", 10, minimum=1),
            db_max_overflow=reader.integer("PAS_DB_MAX_OVERFLOW", 10, minimum=0),
            db_prepared_statements=reader.optional_boolean("PAS_DB_PREPARED_STATEMENTS"),
            session_cache_bytes=reader.integer(
                "PAS_SESSION_CACHE_BYTES", SESSION_CACHE_BYTES, minimum=0
            ),
            held_frame_bytes=reader.integer("PAS_HELD_FRAME_BYTES", HELD_FRAME_BYTES, minimum=0),
            held_body_bytes=reader.integer("PAS_HELD_BODY_BYTES", HELD_BODY_BYTES, minimum=0),
            db_app_role=reader.role_name("PAS_DB_APP_ROLE"),
            health_probe_seconds=reader.number("PAS_HEALTH_PROBE_SECONDS", 2.0),
            shutdown_grace_seconds=reader.number("PAS_SHUTDOWN_GRACE_SECONDS", 10.0),
            shutdown_overrun_seconds=reader.positive("PAS_SHUTDOWN_OVERRUN_SECONDS", 30.0),
            default_tenant=reader.tenant("PAS_DEFAULT_TENANT") or "default",
            token_tenants=read_token_tenants(auth_tokens, auth_tokens_file),
            auth_tokens=auth_tokens,
            auth_tokens_file=auth_tokens_file,
            auth_tokens_watch_seconds=reader.number("PAS_AUTH_TOKENS_WATCH_SECONDS", 2.0),
            allow_unauthenticated=reader.boolean("PAS_ALLOW_UNAUTHENTICATED", False),
            tls_cert_file=reader.file("PAS_TLS_CERT_FILE"),
            tls_key_file=reader.file("PAS_TLS_KEY_FILE"),
            tls_client_ca_file=reader.file("PAS_TLS_CLIENT_CA_FILE"),
            max_receive_message_bytes=reader.integer(
                "PAS_MAX_RECEIVE_MESSAGE_BYTES", DEFAULT_MAX_RECEIVE_MESSAGE_BYTES, minimum=1024
            ),
            max_concurrent_streams=reader.integer("PAS_MAX_CONCURRENT_STREAMS", 128, minimum=1),
            stream_stall_seconds=reader.positive("PAS_STREAM_STALL_SECONDS", STREAM_STALL_SECONDS),
            metrics_listen=reader.optional_listen("PAS_METRICS_LISTEN"),
            inspector_listen=reader.optional_listen("PAS_INSPECTOR_LISTEN"),
            inspector=reader.inspector(),
            log_level=reader.choice("PAS_LOG_LEVEL", "INFO", LOG_LEVELS),
            log_format=reader.choice("PAS_LOG_FORMAT", "json", LOG_FORMATS),
            log_payloads=reader.boolean("PAS_LOG_PAYLOADS", False),
            tracing_exporter=reader.choice("PAS_TRACING_EXPORTER", "none", TRACING_EXPORTERS),
            workers=reader.integer("PAS_WORKERS", usable_cores(), minimum=1),
            tokenizer_preload=reader.families("PAS_TOKENIZER_PRELOAD"),
            reflection=reader.boolean("PAS_REFLECTION", True),
            event_loop=reader.choice("PAS_EVENT_LOOP", "uvloop", ("uvloop", "asyncio")),
            page_token_keys=reader.secrets("PAS_PAGE_TOKEN_KEYS", PAGE_TOKEN_KEY_CHARS),
            limits=reader.limits(),
            quotas=Quotas(
                sessions=reader.integer("PAS_QUOTA_SESSIONS", 0, minimum=0),
                stored_bytes=reader.integer("PAS_QUOTA_STORED_BYTES", 0, minimum=0),
                concurrent_calls=reader.integer("PAS_QUOTA_CONCURRENT_CALLS", 0, minimum=0),
                usage_refresh_seconds=reader.number("PAS_QUOTA_USAGE_REFRESH_SECONDS", 5.0),
            ),
            idempotency_retention_seconds=reader.number(
                "PAS_IDEMPOTENCY_RETENTION_SECONDS", IDEMPOTENCY_RETENTION_SECONDS
            ),
            idempotency_sweep_seconds=reader.number(
                "PAS_IDEMPOTENCY_SWEEP_SECONDS", IDEMPOTENCY_SWEEP_SECONDS
            ),
        )
        if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
            raise ConfigError("PAS_TLS_CERT_FILE and PAS_TLS_KEY_FILE must be set together")
        if settings.tls_client_ca_file is not None and settings.tls_cert_file is None:
            raise ConfigError("PAS_TLS_CLIENT_CA_FILE (mTLS) needs PAS_TLS_CERT_FILE and _KEY_FILE")
        return settings

    def require_authenticated_listener(self) -> None:
        """Refuse to serve without tokens on anything but loopback (unless explicitly allowed).

        Checked when a server starts, not when settings are read: ``migrate`` and the other
        commands serve nothing, so the image's network ``PAS_LISTEN`` must not stop them."""
        if self.token_tenants or self.allow_unauthenticated:
            return
        if self.auth_tokens_file is not None:
            # An empty (or not yet written) file must not turn authentication off.
            raise ConfigError(
                f"PAS_AUTH_TOKENS_FILE={self.auth_tokens_file} holds no token: add "
                "tenant=sha256:<hex> entries, or set PAS_ALLOW_UNAUTHENTICATED=true to serve "
                "without authentication until the file holds some"
            )
        listeners = {"PAS_LISTEN": self.listen, "PAS_INSPECTOR_LISTEN": self.inspector_listen}
        for name, listen in listeners.items():
            if listen is not None and not is_loopback(listen):
                raise ConfigError(
                    f"{name}={listen} is not a loopback address and no bearer tokens are "
                    "configured: set PAS_AUTH_TOKENS or PAS_AUTH_TOKENS_FILE, or "
                    "PAS_ALLOW_UNAUTHENTICATED=true to serve without authentication"
                )

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def prepared_statements(self) -> bool:
        """``PAS_DB_PREPARED_STATEMENTS``, or by default whether the service runs its own
        embedded PostgreSQL (connected directly, no pooler in between)."""
        if self.db_prepared_statements is not None:
            return self.db_prepared_statements
        return not self.database_url

    def resolve_database_url(self) -> str:
        """``database_url``, or the URL of an embedded server started now (blocking: it may
        initialise a cluster). The embedded server stops when the process exits."""
        from admission_service.storage.engine import resolve_database_url

        if self.database_url:
            return self.database_url
        env = {"PAS_DATA_DIR": str(self.data_dir)}
        if self.embedded_pg_port is not None:
            env["PAS_EMBEDDED_PG_PORT"] = str(self.embedded_pg_port)
        return resolve_database_url(env)


def is_loopback(listen: str) -> bool:
    host = listen.rpartition(":")[0]
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` -> (host without IPv6 brackets, port)."""
    host, _, port = listen.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def text(self, name: str) -> str:
        return self.env.get(name, "").strip()

    def _fail(self, name: str, expected: str) -> ConfigError:
        return ConfigError(f"{name} must be {expected}, got {self.env.get(name, '')!r}")

    def _parsed(
        self,
        name: str,
        default: D,
        parse: Callable[[str], T],
        valid: Callable[[T], bool],
        expected: str,
    ) -> T | D:
        """``name`` as ``parse`` reads it, or ``default`` when unset; a value ``parse`` cannot
        read (ValueError) or ``valid`` refuses is not ``expected``."""
        raw = self.text(name)
        if not raw:
            return default
        try:
            value = parse(raw)
        except ValueError:
            raise self._fail(name, expected) from None
        if not valid(value):
            raise self._fail(name, expected)
        return value

    def integer(self, name: str, default: int, *, minimum: int) -> int:
        return self._parsed(
            name, default, int, lambda value: value >= minimum, f"an integer >= {minimum}"
        )

    def number(self, name: str, default: float) -> float:
        return self._parsed(
            name, default, float, lambda value: 0 <= value < _INF, "a number of seconds >= 0"
        )

    def positive(self, name: str, default: float) -> float:
        return self._parsed(
            name, default, float, lambda value: 0 < value < _INF, "a number of seconds > 0"
        )

    def optional_boolean(self, name: str) -> bool | None:
        """True or false; None when unset."""
        return self.boolean(name, False) if self.text(name) else None

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.text(name).lower()
        if not raw:
            return default
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise self._fail(name, "true or false")

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        """One of ``choices``, matched without regard to case."""
        raw = self.text(name).lower()
        if not raw:
            return default
        for choice in choices:
            if choice.lower() == raw:
                return choice
        raise self._fail(name, f"one of {', '.join(choices)}")

    def path(self, name: str) -> Path | None:
        raw = self.text(name)
        return Path(raw).expanduser() if raw else None

    def optional_port(self, name: str) -> int | None:
        raw = self.text(name)
        if not raw:
            return None
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise self._fail(name, "a port number (1-65535)")
        return int(raw)

    def listen(self, name: str, default: str) -> str:
        raw = self.text(name) or default
        host, sep, port = raw.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise self._fail(name, "host:port (for example 127.0.0.1:50051 or [::]:50051)")
        return raw

    def optional_listen(self, name: str) -> str | None:
        return self.listen(name, "") if self.text(name) else None

    def file(self, name: str) -> Path | None:
        path = self.path(name)
        if path is not None and not path.is_file():
            raise self._fail(name, "a readable file")
        return path

    def role_name(self, name: str) -> str | None:
        """A PostgreSQL role name (quoted wherever it is used, so any printable one works)."""
        return self._parsed(
            name,
            None,
            str,
            lambda raw: len(raw.encode()) <= 63 and raw.isprintable(),
            "a PostgreSQL role name (1-63 bytes, printable)",
        )

    def secrets(self, name: str, minimum_chars: int) -> tuple[str, ...]:
        """Comma or space separated secrets, each at least ``minimum_chars`` long."""
        values = tuple(self.text(name).replace(",", " ").split())
        if any(len(value) < minimum_chars for value in values):
            # Never echo the value: it is a secret.
            raise ConfigError(f"{name}: every key must be at least {minimum_chars} characters")
        return values

    def families(self, name: str) -> tuple[str, ...] | None:
        """Route families with a real tokenizer, comma or space separated; ``none``: the
        empty tuple; unset: None (the default is decided by the caller)."""
        from admission_service.tokenizers import TOKENIZER_FAMILIES

        raw = self.text(name).lower()
        if not raw:
            return None
        values = tuple(dict.fromkeys(raw.replace(",", " ").split()))
        if values == ("none",):
            return ()
        if any(value not in TOKENIZER_FAMILIES for value in values):
            raise self._fail(name, f"none or a list of {', '.join(TOKENIZER_FAMILIES)}")
        return values

    def tenant(self, name: str) -> str:
        raw = self.text(name)
        if raw and not _TENANT.fullmatch(raw):
            raise self._fail(name, "a tenant id (1-128 of A-Z a-z 0-9 . _ -)")
        return raw

    def database_url(self, name: str) -> str | None:
        from admission_service.storage.engine import normalise_database_url

        raw = self.text(name)
        if not raw:
            return None
        try:
            return normalise_database_url(raw)
        except Exception as exc:  # sqlalchemy's ArgumentError or our ValueError
            # Never echo the URL: it may hold a password.
            raise ConfigError(f"{name} is not a usable PostgreSQL URL: {exc}") from None

    def inspector(self) -> InspectorSettings:
        defaults = InspectorSettings()
        hosts = tuple(self.text("PAS_INSPECTOR_ALLOWED_HOSTS").lower().replace(",", " ").split())
        if any(not host.isprintable() for host in hosts):
            raise self._fail("PAS_INSPECTOR_ALLOWED_HOSTS", "host names")
        return InspectorSettings(
            allowed_hosts=tuple(host.removeprefix("[").removesuffix("]") for host in hosts),
            max_connections=self.integer(
                "PAS_INSPECTOR_MAX_CONNECTIONS", defaults.max_connections, minimum=1
            ),
            header_timeout_seconds=self.positive(
                "PAS_INSPECTOR_HEADER_TIMEOUT_SECONDS", defaults.header_timeout_seconds
            ),
            body_timeout_seconds=self.number(
                "PAS_INSPECTOR_BODY_TIMEOUT_SECONDS", defaults.body_timeout_seconds
            ),
            render_threads=self.integer(
                "PAS_INSPECTOR_RENDER_THREADS", defaults.render_threads, minimum=1
            ),
            nice=self._parsed(
                "PAS_INSPECTOR_NICE", defaults.nice, int, lambda n: 0 <= n <= 19, "0 to 19"
            ),
        )

    def limits(self) -> Limits:
        defaults = Limits()
        values = {
            f.name: self.integer(
                LIMIT_PREFIX + f.name.upper(), getattr(defaults, f.name), minimum=1
            )
            for f in dataclasses.fields(Limits)
        }
        known = {LIMIT_PREFIX + name.upper() for name in values}
        unknown = sorted(k for k in self.env if k.startswith(LIMIT_PREFIX) and k not in known)
        if unknown:
            raise ConfigError(
                f"unknown limit {', '.join(unknown)}; known limits: {', '.join(sorted(known))}"
            )
        limits = Limits(**values)
        if limits.max_streaming_bytes < limits.max_streamed_response_bytes:
            raise ConfigError(
                f"{LIMIT_PREFIX}MAX_STREAMING_BYTES ({limits.max_streaming_bytes}) must be at "
                f"least {LIMIT_PREFIX}MAX_STREAMED_RESPONSE_BYTES "
                f"({limits.max_streamed_response_bytes}): the largest response must fit"
            )
        if limits.default_page_size > limits.max_page_size:
            raise ConfigError(
                f"{LIMIT_PREFIX}DEFAULT_PAGE_SIZE ({limits.default_page_size}) must not exceed "
                f"{LIMIT_PREFIX}MAX_PAGE_SIZE ({limits.max_page_size})"
            )
        return limits


def read_token_tenants(inline: str, path: Path | None) -> dict[str, str]:
    """The token hashes and their tenants of ``PAS_AUTH_TOKENS`` (``inline``) and of
    ``PAS_AUTH_TOKENS_FILE`` (``path``, read now: a reload calls this again)."""
    inline_name, file_name = "PAS_AUTH_TOKENS", "PAS_AUTH_TOKENS_FILE"
    entries = [(inline_name, entry) for entry in inline.replace(",", " ").split()]
    if path is not None:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"{file_name}: cannot read {path}: {exc.strerror}") from None
        for line in text.splitlines():
            line = line.partition("#")[0].strip()
            entries.extend((file_name, entry) for entry in line.replace(",", " ").split())
    tokens: dict[str, str] = {}
    for source, entry in entries:
        tenant, sep, token_hash = entry.partition("=")
        # Never echo the entry: a misplaced plain token would end up in the error output.
        if not sep or not _TENANT.fullmatch(tenant):
            raise ConfigError(
                f"{source}: every entry must be tenant=sha256:<hex> with a tenant id of "
                "1-128 of A-Z a-z 0-9 . _ -"
            )
        if not is_token_hash(token_hash):
            raise ConfigError(
                f"{source}: the token of tenant {tenant!r} must be given hashed, as "
                "sha256:<64 hex digits> (admission-service token prints it)"
            )
        if tokens.get(token_hash, tenant) != tenant:
            raise ConfigError(f"{source}: one token is configured for two tenants")
        tokens[token_hash] = tenant
    return tokens
