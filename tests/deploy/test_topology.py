"""The compose topology as local processes, with the replicas behind pgbouncer in transaction
mode: what the compose test under Docker (tests/compose/) does not run.

From docker-compose.yml and the Dockerfile, the way a container would run them: the one-shot
``migrate`` job against one PostgreSQL (the run's test server, a fresh database), then
pgbouncer in transaction mode, the two replicas with the compose environment through it — only
addresses change: loopback ports instead of container names, and the database URL — each
waited for with the compose health check, then nginx with the same template. Sessions are
driven through nginx with the Python client; the test checks that both replicas served, that
every session's history is exactly what was sent (and re-derives from its event log), that a
replica can leave without a session noticing, and that pgbouncer carried the connections.
``tests.deploy.measure`` starts the same topology (also without pgbouncer) for throughput.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from admission_service.storage.engine import libpq_url
from promptadmission import (
    AdmissionError,
    Reason,
    RetryPolicy,
    SyncAdmissionClient,
    user_message,
    with_request_id,
)
from promptadmission.v1 import admission_service_pb2 as api
from promptadmission.v1 import session_pb2 as pb
from sqlalchemy.engine import make_url

from tests.api.support import tool_step
from tests.conftest import TestDatabases
from tests.deploy.sessions import SECRET, SERVICE, check_history, drive, scrape
from tests.deploy.topology import (
    DEMO_TOKEN,
    REPLICAS,
    compose,
    healthcheck_command,
    image_command,
    render_nginx,
)

pytestmark = pytest.mark.slow

SESSIONS = 12
STEPS = 6
START_TIMEOUT = 60.0
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def program(name: str) -> str:
    """The path of a system program ``make system-deps`` installs."""
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    if found:
        return found
    if shutil.which("apt-get"):
        pytest.fail(f"{name} is not installed: run `make system-deps` (apt-get install {name})")
    pytest.skip(f"{name} is not installed and this machine has no apt-get to install it")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def base_env() -> dict[str, str]:
    """What a container has besides the compose environment: a PATH to the CLI and a locale.
    Nothing of this process's PAS_* or DATABASE_URL leaks in."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/"),
    }
    if "PYTHONPATH" in os.environ:  # a checkout run without installing it
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@dataclass
class Processes:
    """The processes this test started, stopped (SIGTERM, then SIGKILL) at the end."""

    directory: Path
    started: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=list)
    scratch: list[Path] = field(default_factory=list)  # removed by stop_all

    def start(
        self, name: str, command: list[str], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(
            command, env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
        self.started.append((name, process, log))
        return process

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, timeout: float = 20.0) -> int:
        for entry_name, process, log in self.started:
            if entry_name == name:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(timeout)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
                log.close()
                return process.returncode
        raise KeyError(name)

    def stop_all(self) -> None:
        for name, _, _ in reversed(self.started):
            self.stop(name)
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)


def run(command: list[str], env: Mapping[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        command, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def wait_healthy(
    name: str, processes: Processes, command: list[str], env: Mapping[str, str]
) -> None:
    """Poll the compose health check of a replica until it passes."""
    deadline = time.monotonic() + START_TIMEOUT
    process = next(p for n, p, _ in processes.started if n == name)
    while True:
        assert process.poll() is None, f"{name} exited:\n{processes.log(name)}"
        done = subprocess.run(command, env=dict(env), capture_output=True, timeout=30, check=False)
        if done.returncode == 0:
            return
        assert time.monotonic() < deadline, f"{name} not healthy:\n{processes.log(name)}"
        time.sleep(0.2)


def wait_listening(port: int, name: str, processes: Processes) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{name} not listening:\n{processes.log(name)}"
            time.sleep(0.05)


# ---- nginx and pgbouncer --------------------------------------------------------------------


def start_nginx(
    processes: Processes, lb: Mapping[str, Any], upstreams: list[str], port: int
) -> Path:
    """nginx with the compose template, rendered for these addresses; its access log."""
    directory = processes.directory / "nginx"
    (directory / "conf.d").mkdir(parents=True)
    access_log = directory / "access.log"
    env = {
        **lb["environment"],
        "PAS_UPSTREAM_A": upstreams[0],
        "PAS_UPSTREAM_B": upstreams[1],
        "PAS_LB_LISTEN": f"127.0.0.1:{port}",
        "PAS_LB_ACCESS_LOG": str(access_log),
    }
    (directory / "conf.d/admission-service.conf").write_text(render_nginx(env))
    # What the nginx image's own nginx.conf provides around conf.d/, with paths of this test.
    temp = "\n".join(
        f"    {kind}_temp_path {directory}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (directory / "nginx.conf").write_text(
        f"""{"user root;" if os.geteuid() == 0 else ""}
daemon off;
worker_processes 2;
pid {directory}/nginx.pid;
error_log {directory}/error.log notice;
events {{ worker_connections 1024; }}
http {{
{temp}
    include {directory}/conf.d/*.conf;
}}
"""
    )
    nginx = program("nginx")
    run([nginx, "-t", "-q", "-p", str(directory), "-c", str(directory / "nginx.conf")], {})
    processes.start("nginx", [nginx, "-p", str(directory), "-c", str(directory / "nginx.conf")], {})
    wait_listening(port, "nginx", processes)
    return access_log


def start_pgbouncer(processes: Processes, database_url: str) -> str:
    """pgbouncer in transaction mode in front of ``database_url``; the URL through it."""
    url = make_url(database_url)
    port = free_port()
    # Its own world-readable directory: pgbouncer refuses to run as root and drops to nobody.
    directory = Path(tempfile.mkdtemp(prefix="pas-pgbouncer-"))
    processes.scratch.append(directory)
    directory.chmod(0o755)
    server = f"host={url.host} port={url.port} dbname={url.database} user={url.username}"
    if url.password:
        server += f" password={url.password}"
    (directory / "userlist.txt").write_text(f'"{url.username}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        f"""[databases]
pas = {server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/userlist.txt
pool_mode = transaction
default_pool_size = 8
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""
    )
    command = [program("pgbouncer")]
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for path in (directory, *directory.iterdir()):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        command += ["-u", "nobody"]
    processes.start("pgbouncer", [*command, str(directory / "pgbouncer.ini")], {})
    wait_listening(port, "pgbouncer", processes)
    return f"postgresql://{url.username}@127.0.0.1:{port}/pas"


# ---- the topology ---------------------------------------------------------------------------


@dataclass
class Topology:
    processes: Processes
    lb_target: str
    replicas: dict[str, tuple[str, int]]  # name -> (grpc target, metrics port)
    access_log: Path


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def start_topology(processes: Processes, database_url: str, *, pooler: bool) -> Topology:
    services = compose()["services"]
    url = libpq_url(database_url)

    # 1. The one-shot migration job; the replicas start only once it has succeeded.
    migrate = services["migrate"]
    # Every process here connects as the test server's user, so there is no data role to grant
    # (tests/api/test_app_role.py and the compose test check the grants).
    job_env = {k: v for k, v in migrate["environment"].items() if k != "PAS_DB_APP_ROLE"}
    run(image_command(migrate), {**base_env(), **job_env, "DATABASE_URL": url})

    # 2. The replicas, the compose environment with local addresses.
    replica_url = start_pgbouncer(processes, url) if pooler else url
    replicas: dict[str, tuple[str, int]] = {}
    envs = {}
    for name in REPLICAS:
        service = services[name]
        grpc_port, metrics_port = free_port(), free_port()
        env = {
            **base_env(),
            **service["environment"],
            "DATABASE_URL": replica_url,
            "PAS_LISTEN": f"127.0.0.1:{grpc_port}",
            "PAS_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        }
        processes.start(name, image_command(service), env)
        replicas[name] = (f"127.0.0.1:{grpc_port}", metrics_port)
        envs[name] = env
    for name in REPLICAS:
        wait_healthy(name, processes, healthcheck_command(services[name]), envs[name])

    # 3. nginx in front.
    lb_port = free_port()
    access_log = start_nginx(
        processes, services["lb"], [replicas[name][0] for name in REPLICAS], lb_port
    )
    return Topology(processes, f"127.0.0.1:{lb_port}", replicas, access_log)


def test_two_replicas_behind_nginx_and_pgbouncer_keep_every_session_exact(
    processes: Processes, test_databases: TestDatabases
) -> None:
    database_url = test_databases.create(migrate=False)  # the migrate job creates the schema
    topology = start_topology(processes, database_url, pooler=True)
    no_retry = RetryPolicy(max_attempts=1)  # every call counted once by exactly one replica
    client = SyncAdmissionClient(topology.lb_target, token=DEMO_TOKEN, retry=no_retry)

    sessions = [client.create_session().session.session_id for _ in range(SESSIONS)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        admits = sum(
            pool.map(lambda n: drive(client, sessions[n], n, range(STEPS - 1)), range(SESSIONS))
        )
    for n, session_id in enumerate(sessions):
        check_history(client, session_id, n, STEPS - 1)

    # Both replicas served; together they served every Admit, each exactly once.
    handled = {name: scrape(metrics) for name, (_, metrics) in topology.replicas.items()}
    served = {name: counts.get((SERVICE, "Admit", "OK"), 0) for name, counts in handled.items()}
    assert all(count > 0 for count in served.values()), served
    assert sum(served.values()) == admits == SESSIONS * STEPS

    # A replica leaves (SIGTERM: graceful); the sessions go on through the other one.
    assert processes.stop("service-a") == 0
    for n, session_id in enumerate(sessions):
        drive(client, session_id, n, range(STEPS - 1, STEPS))
        check_history(client, session_id, n, STEPS)
    client.close()

    for name in REPLICAS:
        assert SECRET not in processes.log(name)
    [bouncer] = processes.scratch
    assert "login attempt: db=pas" in (bouncer / "pgbouncer.log").read_text()


def test_a_response_over_4_mib_streams_through_nginx(
    processes: Processes, test_databases: TestDatabases
) -> None:
    """StreamAdmit's 1 MiB chunks pass nginx (issue 23 item 2): a FULL request of five 1 MB
    tool outputs reaches a client with gRPC's default 4 MiB receive limit, whole and verified;
    the unary Admit of it is refused, pointing at StreamAdmit."""
    database_url = test_databases.create(migrate=False)
    topology = start_topology(processes, database_url, pooler=False)
    route = pb.Route(provider="other", model="big", context_window=10_000_000)
    with SyncAdmissionClient(topology.lb_target, token=DEMO_TOKEN, timeout=120) as client:
        session_id = client.create_session().session.session_id
        step = client.admit_streamed(
            api.AdmitRequest(
                session_id=session_id,
                turn=1,
                rendered_prompt="You read files.",
                route=route,
                users=[user_message("Read the five files.")],
            )
        )
        for number in range(1, 5):
            step = client.admit_streamed(
                tool_step(session_id, number, step.admission_id, 1_000_000, route)
            )
        last = with_request_id(tool_step(session_id, 5, step.admission_id, 1_000_000, route))
        with pytest.raises(AdmissionError) as refused:
            client.admit(last)
        assert refused.value.reason == Reason.RESPONSE_TOO_LARGE
        streamed = client.admit_streamed(last)
        assert streamed.ByteSize() > 4 * 1024 * 1024
        results = [
            message.content[0].tool_result.content[0].text.text
            for message in streamed.request.messages
            if message.role == pb.MESSAGE_ROLE_TOOL
        ]
        assert results == [chr(97 + n) * 1_000_000 for n in range(1, 6)]
        assert client.admit_streamed(last) == streamed  # replayed through nginx
