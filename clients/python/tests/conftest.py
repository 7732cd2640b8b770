"""Real redis-server processes for the tests: one with the module loaded, one without (the Lua path).

Each starts on a free loopback port in a fresh directory and is killed at the end of the session.
Binaries: $REDIS_SERVER (else redis-server on PATH); module: $SLIDINGWINDOW_MODULE, else the
release build at the repository root.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import List, Sequence

import pytest
import redis

REPO = Path(__file__).resolve().parents[3]
# The Sentinel tests' shared helper (testkit/python/sentinels.py).
sys.path.insert(0, str(REPO / "testkit" / "python"))
STARTUP_DEADLINE_S = 10.0


def module_path() -> str:
    path = Path(os.environ.get("SLIDINGWINDOW_MODULE", REPO / "target/release/libslidingwindow.so"))
    if not path.is_file():
        pytest.exit(f"module {path} not found: run `cargo build --release` (or set SLIDINGWINDOW_MODULE)", 2)
    return str(path.resolve())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, with_module: bool, extra: Sequence[str] = (), port: int = 0) -> None:
        self.dir = tempfile.mkdtemp(prefix="slidingwindow-py-")
        self.with_module = with_module
        self.extra = list(extra)
        self.proc = None
        self.port = port
        if port and self._spawn():
            return
        # The probed port may be taken before redis binds it: try a few.
        for _ in range(0 if port else 5):
            self.port = free_port()
            if self._spawn():
                return
        raise RuntimeError(f"redis-server did not start:\n{self.log()}")

    def _spawn(self) -> bool:
        args = [
            os.environ.get("REDIS_SERVER", "redis-server"),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
            "--save", "", "--appendonly", "no", "--logfile", "redis.log",
        ]
        if self.with_module:
            args += ["--loadmodule", module_path()]
        args += self.extra
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.client().ping():
                    return True
            except redis.ConnectionError:
                time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING:\n{self.log()}")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30)

    def log(self) -> str:
        try:
            return Path(self.dir, "redis.log").read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def module_server():
    s = Server(with_module=True)
    yield s
    s.close()


@pytest.fixture(scope="session")
def plain_server():
    s = Server(with_module=False)
    yield s
    s.close()


class Cluster:
    """Three masters made into a Redis Cluster with ``redis-cli --cluster create`` ($REDIS_CLI, else
    redis-cli on PATH); ready once every node says cluster_state:ok."""

    def __init__(self, with_module: bool) -> None:
        self.nodes: List[Server] = []
        try:
            for _ in range(3):
                self.nodes.append(Server(with_module, ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            cli = os.environ.get("REDIS_CLI", "redis-cli")
            subprocess.run([cli, "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True)
            deadline = time.monotonic() + 30
            while not all(n.client().cluster("info").get("cluster_state") == "ok" for n in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not come up")
                time.sleep(0.05)
        except BaseException:
            self.close()
            raise

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=30)

    def close(self) -> None:
        for n in self.nodes:
            n.close()


@pytest.fixture(scope="module", params=["module", "lua"])
def cluster(request):
    """A three-master cluster with the module, and one without it (the script)."""
    c = Cluster(with_module=request.param == "module")
    yield request.param, c
    c.close()


@pytest.fixture(params=["module", "lua"])
def path(request, module_server, plain_server):
    """Each helper test runs twice: on a server with the module, and on one without (the script)."""
    server = module_server if request.param == "module" else plain_server
    return request.param, server


@pytest.fixture
def key() -> str:
    return f"rl:{{{uuid.uuid4().hex}}}"
