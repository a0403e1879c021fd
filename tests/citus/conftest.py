"""Fixtures of the Citus tests (``make citus-test``, ``docs/SCALING.md``).

They run only with ``PAS_TEST_CITUS=1``, when ``tests/conftest.py`` starts a local Citus
cluster for the run and every test database is a distributed one; otherwise they are skipped
(``make test`` collects them too). The reliability suite's fixtures are reused for the load
under a worker restart.
"""

from __future__ import annotations

import pytest

from tests.citus.cluster import CitusCluster
from tests.reliability.conftest import (  # noqa: F401 (fixtures)
    figures,
    fresh_database,
    profile,
    seed,
    services,
)


@pytest.fixture(scope="session")
def cluster(citus_cluster: CitusCluster | None) -> CitusCluster:
    if citus_cluster is None:
        pytest.skip("needs a Citus cluster: run by `make citus-test` (PAS_TEST_CITUS=1)")
    return citus_cluster
