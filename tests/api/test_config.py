"""Settings from the environment: defaults, overrides, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
from admission_service.app.limits import Limits
from admission_service.config import ConfigError, Settings


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.listen == "127.0.0.1:50051"
    assert settings.database_url is None
    assert settings.migrate_on_start
    assert settings.model_catalog is None
    assert (settings.db_pool_size, settings.db_max_overflow) == (10, 10)
    assert settings.shutdown_grace_seconds == 10.0
    assert settings.default_tenant == "default"
    assert settings.max_receive_message_bytes == 16 * 1024 * 1024
    assert settings.log_level == "INFO"
    assert settings.limits == Limits()


def test_every_setting_is_read() -> None:
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
            "PAS_SHUTDOWN_GRACE_SECONDS": "2.5",
            "PAS_DEFAULT_TENANT": "acme",
            "PAS_MAX_RECEIVE_MESSAGE_BYTES": "1048576",
            "PAS_LOG_LEVEL": "debug",
            "PAS_LIMIT_MAX_PROMPT_BYTES": "2048",
            "PAS_LIMIT_MAX_USERS": "3",
        }
    )
    assert settings.listen == "[::]:6000"
    assert settings.database_url == "postgresql+psycopg://u:p@db:5432/pas"
    assert settings.data_dir == Path("/var/lib/pas")
    assert settings.embedded_pg_port == 5499
    assert not settings.migrate_on_start
    assert settings.model_catalog == Path("/etc/pas/models.yaml")
    assert (settings.db_pool_size, settings.db_max_overflow) == (3, 0)
    assert settings.shutdown_grace_seconds == 2.5
    assert settings.default_tenant == "acme"
    assert settings.max_receive_message_bytes == 1048576
    assert settings.log_level == "DEBUG"
    assert settings.limits.max_prompt_bytes == 2048
    assert settings.limits.max_users == 3
    assert settings.limits.max_tools == Limits().max_tools


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
        ("PAS_MAX_RECEIVE_MESSAGE_BYTES", "12"),
        ("PAS_LOG_LEVEL", "loud"),
        ("PAS_LIMIT_MAX_PROMPT_BYTES", "0"),
        ("PAS_LIMIT_MAX_PROMPT_BYTES", "1MiB"),
        ("PAS_LIMIT_MAX_PROMTP_BYTES", "10"),
    ],
)
def test_invalid_values_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({name: value})
    assert name in str(caught.value)


def test_the_default_page_size_fits_the_maximum() -> None:
    with pytest.raises(ConfigError, match="DEFAULT_PAGE_SIZE"):
        Settings.from_env({"PAS_LIMIT_DEFAULT_PAGE_SIZE": "10", "PAS_LIMIT_MAX_PAGE_SIZE": "5"})


def test_a_bad_database_url_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"DATABASE_URL": "postgresql://u:s3cret@h:port/db"})
    assert "s3cret" not in str(caught.value)


def test_a_configured_database_url_is_used_as_is() -> None:
    settings = Settings.from_env({"DATABASE_URL": "postgresql://u:p@h/db"})
    assert settings.resolve_database_url() == "postgresql+psycopg://u:p@h/db"
