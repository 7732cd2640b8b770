"""redis-server processes with (or without) the module, and a cluster of them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Sequence

import pytest
import redis
import redis.asyncio

REPO = Path(__file__).resolve().parents[3]
# How long a server gets to answer PING, and a poll to hold.
DEADLINE_S = 10.0


def module_path() -> str:
    """$SLIDINGWINDOW_MODULE, else the release build; ends the session when it is missing."""
    path = Path(os.environ.get("SLIDINGWINDOW_MODULE", REPO / "target/release/libslidingwindow.so"))
    if not path.is_file():
        pytest.exit(f"module {path} not found: run `cargo build --release` (or set SLIDINGWINDOW_MODULE)", 2)
    return str(path.resolve())


def named_server(name: str) -> str:
    """The server binary that scripts/servers.sh gives for `name` (e.g. ``valkey9``), fetched into
    target/servers/ on first use."""
    got = subprocess.run(["bash", str(REPO / "scripts/servers.sh"), name], capture_output=True, text=True)
    paths = [line.split("\t")[1] for line in got.stdout.splitlines() if "\t" in line]
    if got.returncode != 0 or not paths:
        raise RuntimeError(f"scripts/servers.sh {name} gave no server: {got.stdout}{got.stderr}")
    return paths[0]


def free_port(bus: bool = False) -> int:
    """A free loopback port; with `bus`, one whose cluster bus port (+10000, at most 65535) is
    free too (a cluster node on another port exits at start)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not bus:
            return port
        if port <= 65535 - 10000:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    pass
    raise RuntimeError("no free port with a free port + 10000 after 100 tries")


def wait_for(what: str, check, deadline_s: float = DEADLINE_S):
    """Polls `check` until it returns a true value (returned), failing after the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {deadline_s} s: {what}")
        time.sleep(0.005)


def command_calls(client) -> dict:
    """The module's calls by command (``allow``, ``peek``, ...) from ``INFO commandstats``, or,
    where the script ran, ``{"script": n}``: its EVALSHA and EVAL calls. A command never called
    has no entry."""
    stats = client.info("commandstats")
    script = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
    named = {k[len("cmdstat_slidingwindow."):]: v["calls"] for k, v in stats.items()
             if k.startswith("cmdstat_slidingwindow.")}
    return named if not script else {"script": script}


class Server:
    """redis-server on a free loopback port (or `port`), with the module unless `with_module` is
    false, `extra` arguments last; `server` names the binary (else $REDIS_SERVER, else
    redis-server); stop() and start() keep its port (a restart)."""

    def __init__(self, with_module: bool = True, extra: Sequence[str] = (), port: int = 0,
                 server: str | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="slidingwindow-py-")
        self.server = server or os.environ.get("REDIS_SERVER", "redis-server")
        self.with_module = with_module
        self.extra = list(extra)
        self.proc = None
        self.port = port
        if port and self.start():
            return
        # The probed port may be taken before redis binds it: try a few.
        for _ in range(0 if port else 5):
            self.port = free_port(bus="--cluster-enabled" in self.extra)
            if self.start():
                return
        raise RuntimeError(f"redis-server did not start:\n{self.log()}")

    def start(self) -> bool:
        """Starts the process on this port; false when it exits before answering (port taken)."""
        args = [
            self.server,
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
            "--save", "", "--appendonly", "no", "--logfile", "redis.log",
            # A replica's full sync starts at once, not after the default 5 s.
            "--repl-diskless-sync-delay", "0",
        ]
        if self.with_module:
            args += ["--loadmodule", module_path()]
        args += self.extra
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + DEADLINE_S
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

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=30)

    def async_client(self) -> redis.asyncio.Redis:
        """A ``redis.asyncio`` client, for the loop that uses it."""
        return redis.asyncio.Redis(host="127.0.0.1", port=self.port, socket_timeout=30)

    def linked(self, what: str = "the replica's link", deadline_s: float = DEADLINE_S) -> redis.Redis:
        """A client, once this replica's link to its master is up."""
        c = self.client()
        wait_for(what, lambda: c.info("replication")["master_link_status"] == "up", deadline_s)
        return c

    def log(self) -> str:
        try:
            return Path(self.dir, "redis.log").read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGKILL; the directory stays for a start()."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# The slots of each of three masters, as `redis-cli --cluster create` divides them.
SLOT_RANGES = [(0, 5460), (5461, 10922), (10923, 16383)]


class Cluster:
    """Three masters made into a Redis Cluster as ``redis-cli --cluster create`` makes one; ready
    once every node says cluster_state:ok."""

    def __init__(self, with_module: bool = True) -> None:
        self.nodes: List[Server] = []
        try:
            for _ in range(3):
                self.nodes.append(Server(with_module, ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
            # What `redis-cli --cluster create` does, without its waits of a second: a config
            # epoch each, a third of the slots each (its ranges), a MEET of each node to the first.
            for i, (n, (a, b)) in enumerate(zip(self.nodes, SLOT_RANGES)):
                c = n.client()
                c.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", a, b)
            for n in self.nodes[1:]:
                n.client().execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
            wait_for("the cluster up", lambda: all(n.client().cluster("info").get("cluster_state") == "ok"
                                                   for n in self.nodes), 30)
        except BaseException:
            self.close()
            raise

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=30)

    def async_client(self) -> redis.asyncio.RedisCluster:
        """A ``redis.asyncio`` cluster client, for the loop that uses it."""
        return redis.asyncio.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=30)

    def close(self) -> None:
        for n in self.nodes:
            n.close()
