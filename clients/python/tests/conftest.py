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
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import redis

REPO = Path(__file__).resolve().parents[3]
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
    def __init__(self, with_module: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="slidingwindow-py-")
        self.with_module = with_module
        self.proc = None
        self.port = 0
        # The probed port may be taken before redis binds it: try a few.
        for _ in range(5):
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


@pytest.fixture(params=["module", "lua"])
def path(request, module_server, plain_server):
    """Each helper test runs twice: on a server with the module, and on one without (the script)."""
    server = module_server if request.param == "module" else plain_server
    return request.param, server


@pytest.fixture
def key() -> str:
    return f"rl:{{{uuid.uuid4().hex}}}"
