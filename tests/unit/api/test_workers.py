"""The settings ``serve``'s parent hands each worker (``api/workers.py``), without starting one: a
metrics port each, the parent's decision on prepared statements. The real process tree:
``tests/api/test_workers.py``."""

from __future__ import annotations

from admission_service.api.workers import inherited, worker_settings
from admission_service.config import Settings


def test_each_worker_has_its_own_metrics_port() -> None:
    shared = Settings(workers=3, metrics_listen="0.0.0.0:9100", share_port=True)
    ports = [worker_settings(shared, index).metrics_listen for index in range(3)]
    assert ports == ["0.0.0.0:9100", "0.0.0.0:9101", "0.0.0.0:9102"]
    assert worker_settings(shared, 1).workers == 1
    assert worker_settings(Settings(metrics_listen="[::1]:0"), 1).metrics_listen == "[::1]:0"


def test_workers_inherit_the_parents_decision_on_prepared_statements() -> None:
    """The parent resolves the database URL before the workers start (the embedded server's,
    when none is configured): the default, prepared statements on the embedded server only, is
    decided from the configuration, not from the URL the workers are handed."""
    url = "postgresql://db/pas"
    assert not inherited(Settings(database_url=url), url).prepared_statements
    asked = Settings(database_url=url, db_prepared_statements=True)
    assert inherited(asked, url).prepared_statements
    embedded = inherited(Settings(database_url=None), "postgresql://127.0.0.1:5499/pas")
    assert embedded.prepared_statements
    assert embedded.database_url == "postgresql://127.0.0.1:5499/pas"
