#!/usr/bin/env python3
"""`make test-monitoring`: the monitoring/ files end to end, on loopback ports chosen free.

Starts redis-server with the module, Debian's redis_exporter running monitoring/redis_exporter.lua,
and Prometheus with monitoring/prometheus.yml (its target and intervals rewritten for the ports and
a quick run) and alerts.yml; drives scripted traffic; then checks through Prometheus's HTTP API that
every INFO slidingwindow field equals what INFO says, that the rules are loaded and the errors alert
fires; and runs promtool on alerts.yml and on the config. Polls; nothing waits a fixed time.
Takes SLIDINGWINDOW_MODULE (default target/release/libslidingwindow.so) and REDIS_SERVER/REDIS_CLI.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MONITORING = os.path.join(ROOT, "monitoring")
DEADLINE = 60.0

results = {"passed": 0, "failed": 0}


def check(ok, what):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what, probe, deadline=DEADLINE):
    """Calls probe() until it returns something other than None; that value, or None at the end."""
    end = time.monotonic() + deadline
    last_error = None
    while time.monotonic() < end:
        try:
            value = probe()
            if value is not None:
                return value
        except (OSError, ValueError, KeyError, IndexError, subprocess.CalledProcessError) as e:
            last_error = e
        time.sleep(0.1)
    print(f"     timed out waiting for {what} (last error: {last_error})", flush=True)
    return None


def main():
    module = os.environ.get(
        "SLIDINGWINDOW_MODULE", os.path.join(ROOT, "target/release/libslidingwindow.so")
    )
    server = os.environ.get("REDIS_SERVER", "redis-server")
    cli = os.environ.get("REDIS_CLI", "redis-cli")
    work = tempfile.mkdtemp(prefix="slidingwindow-monitoring-")
    procs = []
    try:
        redis_port, exporter_port, prom_port = free_port(), free_port(), free_port()
        while len({redis_port, exporter_port, prom_port}) < 3:
            exporter_port, prom_port = free_port(), free_port()
        log = open(os.path.join(work, "processes.log"), "wb")

        def start(args):
            procs.append(subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL))

        start([server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", work, "--loadmodule", module])

        def redis(*args):
            out = subprocess.run([cli, "-p", str(redis_port), *args], check=True,
                                 capture_output=True, text=True)
            return out.stdout.strip()

        if poll("redis-server", lambda: redis("PING") == "PONG" or None) is None:
            raise SystemExit(f"redis-server did not start; see {work}/processes.log")

        start(["prometheus-redis-exporter",
               "-redis.addr", f"redis://127.0.0.1:{redis_port}",
               "-script", os.path.join(MONITORING, "redis_exporter.lua"),
               "-web.listen-address", f"127.0.0.1:{exporter_port}"])

        # The shipped config, pointed at this exporter and scraping every second.
        with open(os.path.join(MONITORING, "prometheus.yml")) as f:
            config = f.read()
        for old, new in [("127.0.0.1:9121", f"127.0.0.1:{exporter_port}"),
                         ("scrape_interval: 15s", "scrape_interval: 1s"),
                         ("evaluation_interval: 15s", "evaluation_interval: 1s")]:
            if old not in config:
                raise SystemExit(f"monitoring/prometheus.yml has no '{old}' to rewrite")
            config = config.replace(old, new)
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write(config)
        shutil.copy(os.path.join(MONITORING, "alerts.yml"), work)
        start(["prometheus", "--config.file", os.path.join(work, "prometheus.yml"),
               "--storage.tsdb.path", os.path.join(work, "data"),
               "--web.listen-address", f"127.0.0.1:{prom_port}"])

        def api(path, **params):
            url = f"http://127.0.0.1:{prom_port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
            if body.get("status") != "success":
                raise ValueError(body)
            return body["data"]

        def scraped(field):
            """The newest value Prometheus holds for an INFO field, or None."""
            data = api("query", query=f'redis_script_values{{key="{field}"}}')
            return float(data["result"][0]["value"][1]) if data["result"] else None

        # A first scrape before any traffic, so that counters have a 0 to increase from.
        check(poll("a first scrape", lambda: scraped("slidingwindow_errors")) == 0.0,
              "Prometheus scrapes the exporter before the traffic (errors 0)")

        # Scripted traffic: admissions, rejections, trims, PEEKs, errors, compact keys.
        for i in range(40):
            redis("SLIDINGWINDOW.ALLOW", f"user:{i % 4}", "10", "5", str(1000 + i * 100))
        for i in range(10):
            redis("SLIDINGWINDOW.PEEK", f"user:{i % 4}", "10", "5", "5000")
        for bad in (["0", "5", "1000"], ["10", "x", "1000"], ["10", "5", "1000", "COST", "0"]):
            redis("SLIDINGWINDOW.ALLOW", "user:0", *bad)
        redis("CONFIG", "SET", "slidingwindow.storage", "compact")
        for i in range(25):
            redis("SLIDINGWINDOW.ALLOW", f"c:{i % 5}", "60", "100", str(2000 + i), "COST", "3")
        redis("DEL", "c:0")
        # Far later: user:1's requests have all left its window.
        redis("SLIDINGWINDOW.ALLOW", "user:1", "10", "5", "60000")

        info = {}
        for line in redis("INFO", "slidingwindow").splitlines():
            if ":" in line and not line.startswith("#"):
                name, value = line.split(":", 1)
                info[name] = value
        check(len(info) >= 12, f"INFO slidingwindow has its fields ({len(info)})")
        check(int(info.get("slidingwindow_errors", 0)) == 3, "the traffic made 3 errors")
        check(int(info.get("slidingwindow_compact_keys", 0)) == 4, "and 4 compact keys")
        check(int(info.get("slidingwindow_trimmed", 0)) == 5, "and 5 trimmed members")
        major, minor, patch = (int(p) for p in info["slidingwindow_version"].split("."))
        expected = dict(info)
        expected["slidingwindow_version"] = str(major * 10000 + minor * 100 + patch)
        expected["slidingwindow_storage"] = "1" if info["slidingwindow_storage"] == "compact" else "0"
        # The keys refused most, as SLIDINGWINDOW.TOP lists them: user:0..3 got 5 refusals each.
        top = redis("SLIDINGWINDOW.TOP", "COUNT", "10").splitlines()
        entries = dict(zip(top[0::3], top[1::3]))
        check(sorted(entries) == [f"user:{i}" for i in range(4)], f"TOP lists user:0..3: {top}")
        for key, refused in entries.items():
            expected[f"slidingwindow_top_refused:{key}"] = refused
        info.update({f"slidingwindow_top_refused:{k}": v for k, v in entries.items()})
        for field, want in sorted(expected.items()):
            got = poll(f"{field} = {want}",
                       lambda: (lambda v: v if v == float(want) else None)(scraped(field)))
            check(got == float(want), f"Prometheus {field} = INFO's {info[field]}")

        rules = poll("the rules", lambda: api("rules")["groups"] or None) or []
        names = sorted(r["name"] for g in rules for r in g["rules"])
        check(names == ["SlidingwindowCompactBytesGrowing", "SlidingwindowErrors",
                        "SlidingwindowOneKeyRefusedMost", "SlidingwindowRejectionRatioHigh"],
              f"alerts.yml loaded: {names}")
        firing = poll("SlidingwindowErrors to fire", lambda: [
            a for a in api("alerts")["alerts"]
            if a["labels"]["alertname"] == "SlidingwindowErrors" and a["state"] == "firing"] or None)
        check(bool(firing), "SlidingwindowErrors fires after the errors")

        for args in (["check", "rules", os.path.join(MONITORING, "alerts.yml")],
                     ["check", "config", os.path.join(work, "prometheus.yml")]):
            run = subprocess.run(["promtool", *args], capture_output=True, text=True)
            check(run.returncode == 0, f"promtool {' '.join(args[:2])}")
            if run.returncode != 0:
                print(run.stdout + run.stderr)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if results["failed"] == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs and data kept in {work}")
    print(f"monitoring: {results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
