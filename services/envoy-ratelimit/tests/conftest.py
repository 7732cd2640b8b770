"""The envoy-ratelimit binary on a free loopback port against a real redis-server with the module,
and every test again against one without it (the service's script path; tests of what only the
module has take `module_only`): servers from the repository's harness (slidingwindow_testkit,
installed by `make test-envoy`), and a gRPC client that is not Rust: Envoy's own protos from the
envoy-data-plane package (betterproto2), RateLimitServiceSyncStub over grpcio.

The cases marked `each_server` and those with `plain_server` run on Valkey 9 without the module
too (scripts/servers.sh valkey9).

Service: $ENVOY_RATELIMIT (else target/debug/envoy-ratelimit at the repository root, as `make
test-envoy` builds it).
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponse,
    RateLimitServiceSyncStub,
)
from slidingwindow_testkit import DEADLINE_S, REPO, Server, named_server


def service_binary() -> str:
    path = Path(os.environ.get("ENVOY_RATELIMIT", REPO / "target/debug/envoy-ratelimit"))
    if not path.is_file():
        pytest.exit(f"{path} not found: build it, or set ENVOY_RATELIMIT", 2)
    return str(path.resolve())


class Service:
    """The envoy-ratelimit binary on a free port, and a stub talking to it."""

    def __init__(self, config: Path, redis_url: str | list[str], *flags: str, env: dict | None = None) -> None:
        urls = [redis_url] if isinstance(redis_url, str) else redis_url
        redis_flags = [f for u in urls for f in ("--redis", u)]
        self.proc = subprocess.Popen(
            [service_binary(), "--config", str(config), *redis_flags, "--listen", "127.0.0.1:0", *flags],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"service did not start: {line!r} {self.proc.stderr.read()}")
        self.addr = line.removeprefix("listening on ")
        # The HTTP ports' lines follow, in this order, when asked for.
        self.http = self.metrics_addr = None
        if "--http-listen" in flags:
            self.http = self.proc.stdout.readline().strip().removeprefix("http on ")
        if "--metrics-listen" in flags:
            self.metrics_addr = self.proc.stdout.readline().strip().removeprefix("metrics on ")
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = RateLimitServiceSyncStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def health_status(self, service: str = "") -> str:
        """grpc.health.v1.Health/Check's status name (SERVING, NOT_SERVING, ...)."""
        resp = self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE_S)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def metrics(self) -> dict[str, float]:
        """/metrics as {'name{labels}': value}."""
        with urllib.request.urlopen(f"http://{self.metrics_addr}/metrics", timeout=DEADLINE_S) as f:
            text = f.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def ask(self, domain: str, *descriptors, hits_addend: int = 0) -> RateLimitResponse:
        """ShouldRateLimit; each descriptor a list of (key, value) or a RateLimitDescriptor."""
        descs = [d if isinstance(d, RateLimitDescriptor) else descriptor(d) for d in descriptors]
        req = RateLimitRequest(domain=domain, descriptors=descs, hits_addend=hits_addend)
        return self.stub.should_rate_limit(req)

    def close(self) -> str:
        """Stops the service; its stderr."""
        self.channel.close()
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


SCRIPT = (REPO / "clients/lua/slidingwindow.lua").read_text()


def logged(r, k: str, window: int, max_: int) -> int:
    """Requests in the key's window (leased permits included, logged at their lease's end), by
    PEEK at the server's clock at a cost no call fits, so that it only reads: the module's, or
    the same call through the Lua script on a server without it."""
    args = [window, max_, "*", "COST", max_ + 1]
    try:
        return r.execute_command("SLIDINGWINDOW.PEEK", k, *args)[1]
    except redis.ResponseError as e:
        if "unknown command" not in str(e):
            raise
        return r.eval(SCRIPT, 1, k, "peek", "0" * 16, *args)[1]


@pytest.fixture
def module_only(request) -> None:
    """Skips the test on the server without the module: it reads what only the module has."""
    callspec = getattr(request.node, "callspec", None)
    if callspec and callspec.params.get("redis_server", "module") != "module":
        pytest.skip("needs the module (its commands by name, configs, CONVERT or INFO)")


def descriptor(entries, **fields) -> RateLimitDescriptor:
    return RateLimitDescriptor(
        entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries], **fields
    )


def write_config(directory: Path, text: str, name: str = "config.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


# The servers without the module, as managed Redis and Valkey are (`enable-module-command no`: the
# service's script path): redis-server ($REDIS_SERVER, else on PATH), and Valkey 9
# (scripts/servers.sh valkey9).
PLAIN = ["--enable-module-command", "no"]


def pytest_generate_tests(metafunc) -> None:
    """`redis_server`: with the module, then without it (each test again); on Valkey 9 too for
    the tests marked `each_server` (the script path's calls, where servers differ). `plain_server`:
    Redis without the module, and Valkey 9 without it; a test with `plain_server` has
    `redis_server` with the module only."""
    if "plain_server" in metafunc.fixturenames:
        metafunc.parametrize("plain_server", ["script", "valkey9-script"], indirect=True, scope="session")
        # Such a test names its server: the shared one (`start`'s default) once.
        if "redis_server" in metafunc.fixturenames:
            metafunc.parametrize("redis_server", ["module"], indirect=True, scope="session")
    elif "redis_server" in metafunc.fixturenames:
        on_valkey = ["valkey9-script"] if metafunc.definition.get_closest_marker("each_server") else []
        metafunc.parametrize("redis_server", ["module", "script", *on_valkey], indirect=True, scope="session")


def start_server(kind: str) -> Server:
    if kind == "module":
        return Server()
    if kind == "valkey9-script":
        return Server(with_module=False, extra=PLAIN, server=named_server("valkey9"))
    return Server(with_module=False, extra=PLAIN)


@pytest.fixture(scope="session")
def redis_server(request):
    """The shared server: with the module, and (each test again) without it. A test of what
    needs the module takes `module_only`."""
    s = start_server(request.param)
    yield s
    s.close()


@pytest.fixture(scope="session")
def plain_server(request):
    """A server as managed Redis and Valkey are: no module, none loadable (the script path)."""
    s = start_server(request.param)
    yield s
    s.close()


@pytest.fixture
def plain(plain_server) -> redis.Redis:
    """The shared server without the module, emptied for each test."""
    c = plain_server.client()
    c.flushall()
    return c


@pytest.fixture
def r(redis_server) -> redis.Redis:
    """The shared server, emptied for each test."""
    c = redis_server.client()
    c.flushall()
    return c


@pytest.fixture
def start(tmp_path, redis_server):
    """start(config_text, *flags, redis_url=None, env=None) -> Service; stopped after the test."""
    started = []

    def _start(text: str, *flags: str, redis_url: str | None = None, env: dict | None = None) -> Service:
        config = write_config(tmp_path, text, f"config{len(started)}.yaml")
        s = Service(config, redis_url or redis_server.url, *flags, env=env)
        started.append(s)
        return s

    yield _start
    for s in started:
        s.close()
