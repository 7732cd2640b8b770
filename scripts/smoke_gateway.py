"""Smoke test of a released gateway binary (make test-dist): a redis-server with the module and
the gateway with --limit 2/60s on free loopback ports; three requests of one x-api-key answer 200,
200, then 429 with ratelimit-policy, ratelimit and retry-after headers.
Takes SLIDINGWINDOW_MODULE and GATEWAY (the binary) from the environment."""

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str):
    req = urllib.request.Request(url, headers={"x-api-key": "smoke"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


port = free_port()
redis = subprocess.Popen(
    ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
     "--loadmodule", os.environ["SLIDINGWINDOW_MODULE"]],
    stdout=subprocess.DEVNULL,
)
gateway = None
try:
    deadline = time.monotonic() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() != "PONG":
        assert time.monotonic() < deadline and redis.poll() is None, "redis-server did not start"
        time.sleep(0.05)
    gateway = subprocess.Popen(
        [os.environ["GATEWAY"], "--redis", f"redis://127.0.0.1:{port}", "--limit", "2/60s", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    first = gateway.stdout.readline().strip()
    assert first.startswith("listening on http://"), first
    url = first.removeprefix("listening on ") + "/"
    got = [get(url) for _ in range(3)]
    assert [status for status, _ in got] == [200, 200, 429], [status for status, _ in got]
    headers = got[2][1]
    assert headers["ratelimit-policy"] == '"l0";q=2;w=60', headers["ratelimit-policy"]
    assert headers["ratelimit"] == '"l0";r=0;t=60', headers["ratelimit"]
    assert 0 < int(headers["retry-after"]) <= 60, headers["retry-after"]
    print(f"smoke_gateway: {os.environ['GATEWAY']}: 200, 200, 429 ({headers['ratelimit']}, retry-after {headers['retry-after']})")
finally:
    for proc in (gateway, redis):
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
