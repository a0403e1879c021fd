"""A TCP proxy in front of the test PostgreSQL, to make its network fail on cue.

* ``silent = True``: new connections are accepted and never answered (a network gone silent);
  the connections already open keep working.
* ``down = True``: the database is unreachable: open connections are cut, new ones closed at
  once. ``down = False`` brings it back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import make_url


class DatabaseProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.silent = False
        self._down = False
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            for writer in list(self.writers):
                writer.transport.abort()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            if self._down:
                return
            if self.silent:
                await reader.read()  # hold it open, say nothing
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            self.writers.update((writer, up_writer))
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            writer.close()
            self.writers.discard(writer)
            self.tasks.discard(task)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def database_proxy(database_url: str) -> AsyncIterator[tuple[DatabaseProxy, str]]:
    """The proxy and the run's database URL through it."""
    url = make_url(database_url)
    proxy = DatabaseProxy(url.host or "127.0.0.1", url.port or 5432)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield proxy, url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    server.close()
    proxy.down = True
    for task in list(proxy.tasks):
        task.cancel()
    await asyncio.gather(*proxy.tasks, return_exceptions=True)
