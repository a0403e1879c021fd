"""Settings from the environment: defaults, overrides, and clear errors for bad values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from admission_service.api.tenancy import hash_token
from admission_service.app.limits import Limits
from admission_service.config import ConfigError, InspectorSettings, Settings


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.listen == "127.0.0.1:50051"
    assert settings.database_url is None
    assert settings.migrate_on_start
    assert settings.model_catalog is None
    assert (settings.db_pool_size, settings.db_max_overflow) == (10, 10)
    # Prepared statements on the embedded PostgreSQL (a direct connection); with DATABASE_URL
    # a transaction-mode pooler may be in between: off unless asked for.
    assert settings.prepared_statements
    assert not Settings.from_env({"DATABASE_URL": "postgresql://db/pas"}).prepared_statements
    assert settings.shutdown_grace_seconds == 10.0
    assert settings.shutdown_overrun_seconds == 30.0
    assert settings.default_tenant == "default"
    assert settings.max_receive_message_bytes == 16 * 1024 * 1024
    assert settings.max_concurrent_streams == 128  # the compose nginx's own, per connection
    assert settings.log_level == "INFO"
    assert settings.limits == Limits()
    assert settings.token_tenants == {}
    assert not settings.allow_unauthenticated
    assert settings.tls_cert_file is None
    assert settings.metrics_listen is None
    assert (settings.log_format, settings.log_payloads) == ("json", False)
    assert settings.tracing_exporter == "none"
    assert settings.event_loop == "uvloop"
    assert settings.stream_stall_seconds == 30.0


def test_every_setting_is_read(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("PEM")
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"# rotated monthly\nbeta={hash_token('t2')}  # beta's CI\n")
    settings = Settings.from_env(
        {
            "PAS_LISTEN": "[::]:6000",
            "DATABASE_URL": "postgres://u:p@db:5432/pas",
            "PAS_DATA_DIR": "/var/lib/pas",
            "PAS_EMBEDDED_PG_PORT": "5499",
            "PAS_MIGRATE_ON_START": "false",
            "PAS_MODEL_CATALOG": "/etc/pas/models.yaml",
            "PAS_DB_POOL_SIZE": "3",
            "PAS_DB_MAX_OVERFLOW": "0",
            "PAS_DB_PREPARED_STATEMENTS": "true",
            "PAS_DB_APP_ROLE": "pas_app",
            "PAS_HEALTH_PROBE_SECONDS": "0.5",
            "PAS_SHUTDOWN_GRACE_SECONDS": "2.5",
            "PAS_SHUTDOWN_OVERRUN_SECONDS": "12",
            "PAS_DEFAULT_TENANT": "acme",
            "PAS_AUTH_TOKENS": f"acme={hash_token('t1')}, acme={hash_token('t1b')}",
            "PAS_AUTH_TOKENS_FILE": str(tokens_file),
            "PAS_ALLOW_UNAUTHENTICATED": "true",
            "PAS_TLS_CERT_FILE": str(tmp_path / "cert.pem"),
            "PAS_TLS_KEY_FILE": str(tmp_path / "key.pem"),
            "PAS_TLS_CLIENT_CA_FILE": str(tmp_path / "ca.pem"),
            "PAS_MAX_RECEIVE_MESSAGE_BYTES": "1048576",
            "PAS_METRICS_LISTEN": "0.0.0.0:9464",
            "PAS_LOG_LEVEL": "debug",
            "PAS_LOG_FORMAT": "text",
            "PAS_LOG_PAYLOADS": "yes",
            "PAS_TRACING_EXPORTER": "console",
            "PAS_LIMIT_MAX_PROMPT_BYTES": "2048",
            "PAS_LIMIT_MAX_USERS": "3",
            "PAS_PAGE_TOKEN_KEYS": f"{'n' * 32}, {'o' * 40}",
            "PAS_AUTH_TOKENS_WATCH_SECONDS": "0.5",
            "PAS_REFLECTION": "false",
            "PAS_EVENT_LOOP": "asyncio",
            "PAS_STREAM_STALL_SECONDS": "2.5",
            "PAS_MAX_CONCURRENT_STREAMS": "16",
        }
    )
    assert settings.stream_stall_seconds == 2.5
    assert settings.max_concurrent_streams == 16
    assert settings.auth_tokens_file == tokens_file  # read again on SIGHUP or a change
    assert settings.auth_tokens_watch_seconds == 0.5
    assert not settings.reflection
    assert settings.event_loop == "asyncio"
    assert settings.page_token_keys == ("n" * 32, "o" * 40)
    assert settings.listen == "[::]:6000"
    assert settings.database_url == "postgresql+psycopg://u:p@db:5432/pas"
    assert settings.data_dir == Path("/var/lib/pas")
    assert settings.embedded_pg_port == 5499
    assert not settings.migrate_on_start
    assert settings.model_catalog == Path("/etc/pas/models.yaml")
    assert (settings.db_pool_size, settings.db_max_overflow) == (3, 0)
    assert settings.prepared_statements
    assert settings.db_app_role == "pas_app"
    assert settings.health_probe_seconds == 0.5
    assert settings.shutdown_grace_seconds == 2.5
    assert settings.shutdown_overrun_seconds == 12.0
    assert settings.default_tenant == "acme"
    assert settings.token_tenants == {
        hash_token("t1"): "acme",
        hash_token("t1b"): "acme",
        hash_token("t2"): "beta",
    }
    assert settings.allow_unauthenticated
    assert settings.tls_cert_file == tmp_path / "cert.pem"
    assert settings.tls_key_file == tmp_path / "key.pem"
    assert settings.tls_client_ca_file == tmp_path / "ca.pem"
    assert settings.max_receive_message_bytes == 1048576
    assert settings.metrics_listen == "0.0.0.0:9464"
    assert settings.log_level == "DEBUG"
    assert settings.log_format == "text"
    assert settings.log_payloads
    assert settings.tracing_exporter == "console"
    assert settings.limits.max_prompt_bytes == 2048
    assert settings.limits.max_users == 3
    assert settings.limits.max_tools == Limits().max_tools


def test_a_short_page_token_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"PAS_PAGE_TOKEN_KEYS": f"{'n' * 32} short-secret"})
    assert "PAS_PAGE_TOKEN_KEYS" in str(caught.value)
    assert "short-secret" not in str(caught.value)


def test_every_limit_has_a_variable() -> None:
    env = {f"PAS_LIMIT_{name.upper()}": "7" for name in Limits.__dataclass_fields__}
    limits = Settings.from_env(env).limits
    assert all(getattr(limits, name) == 7 for name in Limits.__dataclass_fields__)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PAS_LISTEN", "50051"),
        ("PAS_LISTEN", "localhost:http"),
        ("DATABASE_URL", "mysql://u:p@h/db"),
        ("PAS_EMBEDDED_PG_PORT", "70000"),
        ("PAS_MIGRATE_ON_START", "maybe"),
        ("PAS_DB_POOL_SIZE", "0"),
        ("PAS_DB_POOL_SIZE", "ten"),
        ("PAS_DB_MAX_OVERFLOW", "-1"),
        ("PAS_SHUTDOWN_GRACE_SECONDS", "-1"),
        ("PAS_SHUTDOWN_GRACE_SECONDS", "nan"),
        ("PAS_SHUTDOWN_OVERRUN_SECONDS", "0"),
        ("PAS_SHUTDOWN_OVERRUN_SECONDS", "inf"),
        ("PAS_MAX_RECEIVE_MESSAGE_BYTES", "12"),
        ("PAS_LOG_LEVEL", "loud"),
        ("PAS_LIMIT_MAX_PROMPT_BYTES", "0"),
        ("PAS_LIMIT_MAX_PROMPT_BYTES", "1MiB"),
        ("PAS_LIMIT_MAX_PROMTP_BYTES", "10"),
        ("PAS_DEFAULT_TENANT", "a tenant"),
        ("PAS_ALLOW_UNAUTHENTICATED", "sometimes"),
        ("PAS_TLS_CERT_FILE", "/nonexistent/cert.pem"),
        ("PAS_METRICS_LISTEN", "9464"),
        ("PAS_LOG_FORMAT", "xml"),
        ("PAS_LOG_PAYLOADS", "all"),
        ("PAS_TRACING_EXPORTER", "jaeger"),
        ("PAS_AUTH_TOKENS", "acme"),
        ("PAS_AUTH_TOKENS", "acme=sha256:abc"),
        ("PAS_AUTH_TOKENS_FILE", "/nonexistent/tokens"),
        ("PAS_AUTH_TOKENS_WATCH_SECONDS", "-1"),
        ("PAS_REFLECTION", "maybe"),
        ("PAS_STREAM_STALL_SECONDS", "0"),
        ("PAS_STREAM_STALL_SECONDS", "-3"),
        ("PAS_MAX_CONCURRENT_STREAMS", "0"),
    ],
)
def test_invalid_values_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({name: value})
    assert name in str(caught.value)


def test_the_default_page_size_fits_the_maximum() -> None:
    with pytest.raises(ConfigError, match="DEFAULT_PAGE_SIZE"):
        Settings.from_env({"PAS_LIMIT_DEFAULT_PAGE_SIZE": "10", "PAS_LIMIT_MAX_PAGE_SIZE": "5"})


def test_a_worker_can_hold_the_largest_streamed_response() -> None:
    with pytest.raises(ConfigError, match=r"MAX_STREAMING_BYTES.*MAX_STREAMED_RESPONSE_BYTES"):
        Settings.from_env({"PAS_LIMIT_MAX_STREAMING_BYTES": str(1 << 20)})
    limits = Settings.from_env(
        {
            "PAS_LIMIT_MAX_STREAMING_BYTES": str(8 << 20),
            "PAS_LIMIT_MAX_STREAMED_RESPONSE_BYTES": str(8 << 20),
        }
    ).limits
    assert limits.max_streaming_bytes == limits.max_streamed_response_bytes == 8 << 20


def test_a_bad_database_url_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"DATABASE_URL": "postgresql://u:s3cret@h:port/db"})
    assert "s3cret" not in str(caught.value)


def test_a_configured_database_url_is_used_as_is() -> None:
    settings = Settings.from_env({"DATABASE_URL": "postgresql://u:p@h/db"})
    assert settings.resolve_database_url() == "postgresql+psycopg://u:p@h/db"


def test_a_plain_token_is_refused_and_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"PAS_AUTH_TOKENS": "acme=s3cret-plain-token"})
    assert "hashed" in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_one_token_cannot_belong_to_two_tenants() -> None:
    entries = f"a={hash_token('x')} b={hash_token('x')}"
    with pytest.raises(ConfigError, match="two tenants"):
        Settings.from_env({"PAS_AUTH_TOKENS": entries})


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "[::]:50051", "10.1.2.3:50051"])
def test_a_network_listener_needs_tokens_or_an_explicit_opt_out(listen: str) -> None:
    with pytest.raises(ConfigError, match="PAS_ALLOW_UNAUTHENTICATED"):
        Settings.from_env({"PAS_LISTEN": listen}).require_authenticated_listener()
    tokens = {"PAS_LISTEN": listen, "PAS_AUTH_TOKENS": f"t={hash_token('x')}"}
    Settings.from_env(tokens).require_authenticated_listener()
    opt_out = {"PAS_LISTEN": listen, "PAS_ALLOW_UNAUTHENTICATED": "true"}
    Settings.from_env(opt_out).require_authenticated_listener()


@pytest.mark.parametrize("listen", ["127.0.0.1:50051", "127.0.0.2:0", "localhost:1", "[::1]:1"])
def test_loopback_listeners_may_run_without_tokens(listen: str) -> None:
    settings = Settings.from_env({"PAS_LISTEN": listen})
    settings.require_authenticated_listener()
    assert settings.token_tenants == {}


def test_reading_a_network_listener_without_tokens_is_not_an_error() -> None:
    # The image sets PAS_LISTEN=0.0.0.0:…; `migrate` reads the same settings and serves nothing.
    assert Settings.from_env({"PAS_LISTEN": "0.0.0.0:50051"}).listen == "0.0.0.0:50051"


def test_tls_files_go_together(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("PEM")
    with pytest.raises(ConfigError, match="together"):
        Settings.from_env({"PAS_TLS_CERT_FILE": str(pem)})
    with pytest.raises(ConfigError, match="mTLS"):
        Settings.from_env({"PAS_TLS_CLIENT_CA_FILE": str(pem)})


def test_the_data_directory_default_is_the_storage_one() -> None:
    from admission_service.storage.engine import DEFAULT_DATA_DIR

    assert Settings().data_dir == DEFAULT_DATA_DIR


def test_the_configuration_depends_on_no_api_module() -> None:
    """Dependencies point down: the API reads the configuration, never the reverse."""
    code = (
        "import sys, admission_service.config; "
        "print(sorted(m for m in sys.modules if m.startswith('admission_service.api')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_quotas_and_idempotency_retention_are_read() -> None:
    from admission_service.app.limits import Quotas

    settings = Settings.from_env(
        {
            "PAS_QUOTA_SESSIONS": "10",
            "PAS_QUOTA_STORED_BYTES": "1000000",
            "PAS_QUOTA_CONCURRENT_CALLS": "4",
            "PAS_QUOTA_USAGE_REFRESH_SECONDS": "0.5",
            "PAS_IDEMPOTENCY_RETENTION_SECONDS": "3600",
            "PAS_IDEMPOTENCY_SWEEP_SECONDS": "0",
            "PAS_LIMIT_MAX_RESPONSE_BYTES": "8388608",
        }
    )
    assert settings.quotas == Quotas(10, 1_000_000, 4, 0.5)
    assert settings.idempotency_retention_seconds == 3600
    assert settings.idempotency_sweep_seconds == 0
    assert settings.limits.max_response_bytes == 8 * 1024 * 1024
    defaults = Settings.from_env({})
    assert defaults.quotas == Quotas()  # off
    assert defaults.idempotency_retention_seconds == 24 * 3600
    with pytest.raises(ConfigError, match="PAS_QUOTA_SESSIONS"):
        Settings.from_env({"PAS_QUOTA_SESSIONS": "-1"})


def test_the_inspectors_settings_are_read_and_checked() -> None:
    assert Settings.from_env({}).inspector == InspectorSettings()
    read = Settings.from_env(
        {
            "PAS_INSPECTOR_ALLOWED_HOSTS": "Ops.Example.com, [::1] 10.0.0.5",
            "PAS_INSPECTOR_MAX_CONNECTIONS": "16",
            "PAS_INSPECTOR_HEADER_TIMEOUT_SECONDS": "2.5",
            "PAS_INSPECTOR_BODY_TIMEOUT_SECONDS": "0",
            "PAS_INSPECTOR_RENDER_THREADS": "3",
            "PAS_INSPECTOR_NICE": "0",
        }
    ).inspector
    assert read == InspectorSettings(("ops.example.com", "::1", "10.0.0.5"), 16, 2.5, 0.0, 3, 0)
    for name, value in [
        ("PAS_INSPECTOR_MAX_CONNECTIONS", "0"),
        ("PAS_INSPECTOR_HEADER_TIMEOUT_SECONDS", "0"),
        ("PAS_INSPECTOR_BODY_TIMEOUT_SECONDS", "-1"),
        ("PAS_INSPECTOR_RENDER_THREADS", "0"),
        ("PAS_INSPECTOR_NICE", "20"),
        ("PAS_INSPECTOR_LISTEN", "8080"),
    ]:
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: value})
