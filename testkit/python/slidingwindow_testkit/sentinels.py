"""Three (or `count`) Redis Sentinels watching one master, each on a free loopback port (never
26379), for the Python and the Envoy service's Sentinel tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from slidingwindow_testkit.servers import free_port, wait_for


def _pid(c: redis.Redis) -> int | None:
    """The process id of the server answering on c's port, or None while none answers."""
    try:
        return int(c.info("server")["process_id"])
    except redis.ConnectionError:
        return None


class Sentinels:
    def __init__(self, service: str, master_port: int, count: int = 3) -> None:
        self.service = service
        self.dir = tempfile.mkdtemp(prefix="slidingwindow-sentinel-")
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []
        try:
            for i in range(count):
                self._start(i, master_port)
            for port in self.ports:
                c = redis.Redis(port=port, socket_timeout=5)
                # Each sentinel knows the others (needed to elect a leader for the failover).
                wait_for("the sentinels know each other",
                         lambda: c.sentinel_master(service)["num-other-sentinels"] == count - 1, 30)
        except BaseException:
            self.close()
            raise

    def _start(self, i: int, master_port: int) -> None:
        # A probed port may be taken before the sentinel binds it (by another sentinel started
        # here, too): that sentinel exits, and another port is tried.
        for _ in range(5):
            port = free_port()
            if port in self.ports or port == master_port:
                continue
            conf = Path(self.dir, f"sentinel-{i}.conf")
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.dir}\nlogfile sentinel-{i}.log\n"
                f"sentinel monitor {self.service} 127.0.0.1 {master_port} 2\n"
                f"sentinel down-after-milliseconds {self.service} 1000\n"
                f"sentinel failover-timeout {self.service} 10000\n"
            )
            proc = subprocess.Popen([os.environ.get("REDIS_SERVER", "redis-server"), str(conf), "--sentinel"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append(proc)
            c = redis.Redis(port=port, socket_timeout=5)
            wait_for(f"sentinel on {port}", lambda: proc.poll() is not None or _pid(c) == proc.pid, 10)
            if proc.poll() is None:
                self.ports.append(port)
                return
            self.procs.remove(proc)
        raise RuntimeError(f"sentinel {i} did not start on any of 5 ports")

    def master_port(self) -> int:
        """The master's port as the first sentinel names it."""
        return int(redis.Redis(port=self.ports[0]).sentinel_get_master_addr_by_name(self.service)[1])

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
