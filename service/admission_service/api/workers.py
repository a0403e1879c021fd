"""``serve`` on every core: N worker processes sharing one port (issue 14, docs/SCALING.md).

One Python process runs one event loop on one core, and the service is CPU-bound per call, so
the port is shared by ``PAS_WORKERS`` processes (default: the cores this process may run on,
``os.sched_getaffinity``). Each worker is a whole server (``server.serve``): its own event
loop, its own database pool of ``PAS_DB_POOL_SIZE`` (+ ``PAS_DB_MAX_OVERFLOW``) connections,
its own health service (it goes NOT_SERVING when it drains) and its own metrics endpoint on
``PAS_METRICS_LISTEN``'s port + its index (0, 1, …). The kernel spreads new connections over
the workers (``SO_REUSEPORT``); a connection stays with the worker that accepted it.

The parent does what must happen once: it starts the embedded PostgreSQL (when no
``DATABASE_URL`` is set) and runs the migrations, imports the service and loads the tokenizers
of ``PAS_TOKENIZER_PRELOAD`` (default: the model catalog's families), then forks the workers
with the resolved URL and supervises them. Forked, the workers share the parent's pages
copy-on-write: the tokenizers' tables (tens of MiB each, read-only after the load) and the
imported modules (frozen out of the garbage collector's reach, ``gc.freeze``, so collections do
not write to them) are in memory once per server, not once per worker, and no worker's first
Admit of a preloaded family waits for its load. The parent creates no gRPC object, event loop,
thread or database connection before the fork, so the workers inherit none.

With ``PAS_INSPECTOR_LISTEN`` the parent also starts the operator inspector in a process of its
own (``inspector/http.py``: its own event loop, database pool and bearer tokens, at a lower CPU
priority), supervised like a worker: no page is rendered in a worker, and the workers never bind
its port. The parent then exists even with one worker.

SIGTERM or SIGINT (and SIGHUP, the token reload) are forwarded to every child; each drains as
a single server does (refuses new calls, lets in-flight calls finish for
``PAS_SHUTDOWN_GRACE_SECONDS``) and the parent exits when all have; one still running past the
grace + its watchdog's overrun + ``STRAGGLER_SECONDS`` (its watchdog could not run) is killed,
and the parent exits 1 naming it. A worker that exits on its
own (or the inspector) is a failure: the parent stops the others and exits non-zero, for the
supervisor above it (systemd, Kubernetes) to restart the whole server; a parent that dies
(``kill -9``) takes its children with it. With one worker and no inspector there is no parent:
the process serves itself, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from dataclasses import replace
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from admission_service.api import event_loop
from admission_service.api.allocator import reuse_large_buffers
from admission_service.config import ConfigError, Settings, split_listen
from admission_service.telemetry.logs import configure_logging

_log = logging.getLogger(__name__)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
POLL_SECONDS = 1.0
# Past a worker's own watchdog (api/shutdown_watchdog.py), before the parent kills it.
STRAGGLER_SECONDS = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def serve_workers(settings: Settings) -> int:
    """Serve with ``settings.workers`` processes until SIGTERM/SIGINT; the exit status."""
    from admission_service.api.server import serve

    settings.require_authenticated_listener()  # before any worker starts
    # A SIGHUP (a reload) before the handlers are installed must not stop the server.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if settings.workers <= 1 and settings.inspector_listen is None:
        preload_tokenizers(settings)
        reuse_large_buffers()
        event_loop.run(serve(settings), settings.event_loop)
        return 0
    shared = _shared(settings)
    preload_tokenizers(shared)
    # Objects alive now stay out of every later collection, so the workers' collections do
    # not write to (and un-share) the pages the parent's imports and tokenizers filled.
    gc.collect()
    gc.freeze()
    return _Supervisor(shared).run()


def preload_families(settings: Settings) -> tuple[str, ...]:
    """The route families whose tokenizers ``serve`` loads before serving:
    ``PAS_TOKENIZER_PRELOAD``, or the families the model catalog names."""
    from admission_service.catalog.loader import load_catalog
    from admission_service.tokenizers import catalog_families

    if settings.tokenizer_preload is not None:
        return settings.tokenizer_preload
    catalog = load_catalog(settings.model_catalog)
    return catalog_families(info.provider for info in catalog.models.values())


def preload_tokenizers(settings: Settings) -> None:
    """Load the preloaded families' tokenizers in this process (the parent, before the fork)."""
    from admission_service.tokenizers import preload

    preload(preload_families(settings))


def _shared(settings: Settings) -> Settings:
    """What every worker inherits: the database resolved once (the embedded server started
    here, in the parent) and migrated once (``inherited``)."""
    from admission_service.storage.engine import migrate_to_latest

    url = settings.resolve_database_url()
    if settings.migrate_on_start:
        _log.info("running database migrations")
        migrate_to_latest(url)
    return inherited(settings, url)


def inherited(settings: Settings, url: str) -> Settings:
    """The workers' settings on the resolved, migrated database ``url``: no migrations, whether
    to prepare statements as decided from the configuration (not from ``url``, which is set
    even for the embedded server), and a fixed port to share."""
    return replace(
        settings,
        db_prepared_statements=settings.prepared_statements,
        database_url=url,
        migrate_on_start=False,
        listen=_fixed_port(settings.listen),
        share_port=True,
    )


def _fixed_port(listen: str) -> str:
    """``listen`` with port 0 replaced by a free port, which every worker then binds."""
    host, port = split_listen(listen)
    if port != 0:
        return listen
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    return f"{listen.rpartition(':')[0]}:{port}"


def worker_settings(settings: Settings, index: int) -> Settings:
    """Worker ``index``'s settings: its own metrics port (the configured one + ``index``)."""
    metrics = settings.metrics_listen
    if metrics is not None:
        port = split_listen(metrics)[1]
        metrics = f"{metrics.rpartition(':')[0]}:{port + index if port else 0}"
    return replace(settings, workers=1, metrics_listen=metrics, inspector_listen=None)


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive its parent: after a ``kill -9`` of the parent, orphaned workers
    would go on serving the shared port beside a restarted server. Linux sends the worker
    SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``); a parent already gone ends it
    now."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def _child_starts(settings: Settings, parent: int) -> None:
    """What every child of the parent does first."""
    # Forked from the parent while its forwarding handlers were installed.
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent(parent)
    # Until the server installs its own handlers: a terminal's Ctrl-C reaches the whole
    # process group, and the parent forwards it as SIGTERM anyway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # forwarded reloads, until the server is up
    configure_logging(settings.log_level, settings.log_format)


def _worker_main(settings: Settings, index: int, count: int, parent: int) -> None:
    """A worker process: one server on the shared port, until SIGTERM/SIGINT."""
    from admission_service.api.server import serve

    _child_starts(settings, parent)
    # Here, not in the parent: the parent's loads would otherwise keep their freed memory.
    reuse_large_buffers()
    _log.info(
        "worker %d of %d (pid %d) starting on %s (%s)",
        index,
        count,
        os.getpid(),
        settings.listen,
        settings.event_loop,
    )
    event_loop.run(serve(settings), settings.event_loop)
    _log.info("worker %d of %d (pid %d) stopped", index, count, os.getpid())


def _inspector_main(settings: Settings, parent: int) -> None:
    """The inspector's process: its pages on PAS_INSPECTOR_LISTEN, until SIGTERM/SIGINT."""
    from admission_service.inspector.http import serve_inspector

    _child_starts(settings, parent)
    # Below the workers: when the cores are busy, the kernel runs the API first.
    os.nice(settings.inspector.nice)
    try:
        event_loop.run(serve_inspector(settings), settings.event_loop)
    except ConfigError as exc:  # its port taken, its TLS files unreadable
        _log.error("the inspector cannot start: %s", exc)
        sys.exit(2)


class _Supervisor:
    def __init__(self, settings: Settings) -> None:
        # Forked: the workers share the parent's imports and preloaded tokenizers (above).
        context = multiprocessing.get_context("fork")
        self.settings = settings
        self.workers: list[BaseProcess] = [
            context.Process(
                target=_worker_main,
                args=(worker_settings(settings, index), index, settings.workers, os.getpid()),
                name=f"admission-service-worker-{index}",
            )
            for index in range(settings.workers)
        ]
        # Supervised alike: the workers and, when configured, the inspector's process.
        self.children = list(self.workers)
        if settings.inspector_listen is not None:
            self.children.append(
                context.Process(
                    target=_inspector_main,
                    args=(settings, os.getpid()),
                    name="admission-service-inspector",
                )
            )
        self.stopping = False
        # When the children must have stopped by (set by the first stop): past it, the
        # stragglers are killed.
        self.stop_deadline: float | None = None

    def _forward(self, signum: int, frame: FrameType | None = None) -> None:
        if signum != signal.SIGHUP:
            self.stopping = True
            signum = signal.SIGTERM
            if self.stop_deadline is None:
                self.stop_deadline = time.monotonic() + self._stop_bound()
        for worker in self.children:
            if worker.pid is not None and worker.exitcode is None:
                with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                    os.kill(worker.pid, signum)

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._forward) for sig in FORWARDED}
        try:
            for child in self.children:
                child.start()
            _log.info(
                "serving with %d workers (pids %s) on %s",
                len(self.workers),
                ", ".join(str(worker.pid) for worker in self.workers),
                self.settings.listen,
            )
            return self._supervise()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stop_bound(self) -> float:
        """How long the children get to stop: a worker's own watchdog ends it at the grace +
        the overrun; this is for one whose watchdog cannot run (a process stopped, a C call
        holding the GIL for ever)."""
        settings = self.settings
        return (
            settings.shutdown_grace_seconds + settings.shutdown_overrun_seconds + STRAGGLER_SECONDS
        )

    def _wait_seconds(self) -> float:
        """How long to wait for a child to end before looking again: until the stop's
        deadline, or a poll (a signal interrupting the wait restarts it with its old timeout,
        so the deadline a signal sets is seen at the next poll)."""
        if self.stop_deadline is None:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, self.stop_deadline - time.monotonic()))

    def _kill_stragglers(self, running: list[BaseProcess]) -> None:
        for worker in running:
            _log.error(
                "%s (pid %s) did not stop within %gs of SIGTERM: killing it",
                worker.name,
                worker.pid,
                self._stop_bound(),
            )
            worker.kill()
            worker.join()

    def _supervise(self) -> int:
        status = 0
        running = list(self.children)
        while running:
            ended_now = wait([worker.sentinel for worker in running], timeout=self._wait_seconds())
            if self.stop_deadline is not None and time.monotonic() >= self.stop_deadline:
                still = [worker for worker in running if worker.sentinel not in ended_now]
                if still:
                    self._kill_stragglers(still)
                    status = 1
                    running = [worker for worker in running if worker not in still]
            for ended in ended_now:
                worker = next(w for w in running if w.sentinel == ended)
                worker.join()
                running.remove(worker)
                if not self.stopping:
                    _log.error(
                        "%s (pid %s) exited with status %s: stopping the server",
                        worker.name,
                        worker.pid,
                        worker.exitcode,
                    )
                    status = 1
                    self._forward(signal.SIGTERM)
                elif worker.exitcode not in (0, -signal.SIGTERM):
                    # -SIGTERM: stopped while still starting, before it served any call.
                    _log.error(
                        "%s (pid %s) exited with status %s while stopping",
                        worker.name,
                        worker.pid,
                        worker.exitcode,
                    )
                    status = 1
        _log.info("stopped")
        return status
