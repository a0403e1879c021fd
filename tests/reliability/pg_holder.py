"""An embedded PostgreSQL in a process of its own, for the scenarios that stop and start it.

``python -m tests.reliability.pg_holder DATA_DIR [PORT]`` starts (initialising on first use)
the server in ``DATA_DIR``, prints its URL, and stops it when its standard input closes. The
test process itself never forks PostgreSQL while its gRPC threads are busy (under root the
server is started as another OS user, which rules out ``vfork``; a full ``fork`` of a process
with busy gRPC threads is not safe).
"""

from __future__ import annotations

import sys
from pathlib import Path

from admission_service.storage.embedded import start_embedded_postgres


def main() -> None:
    data_dir = Path(sys.argv[1])
    port = int(sys.argv[2]) if len(sys.argv) > 2 else None
    server = start_embedded_postgres(data_dir, port=port, durable=False)
    sys.stdout.write(f"{server.port} {server.url()}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the test closes our standard input (or dies)
    server.stop()


if __name__ == "__main__":
    main()
