"""Failover under Sentinel (docs/operating.md, "Replication and failover"): a master and a replica
with the module and three sentinels, started here on free loopback ports; traffic through the
helper with ``confirm`` over redis-py's Sentinel client; the replica stopped (SIGSTOP) so that
admissions go unacknowledged, then the master killed (SIGKILL) under traffic, the failover, and the
killed master restarted as a replica of the new one. Confirmed admissions never exceed the limit
in any window, and the restarted master ends with exactly the new master's data."""

from __future__ import annotations

import signal
import threading

import redis
from redis.sentinel import Sentinel

from slidingwindow import Limit, SlidingWindow, UnavailableError
from slidingwindow_testkit import Sentinels, Server, wait_for

from test_options import busiest

SERVICE = "sw"
LIMIT = Limit(1, 100)
DATA = ["--enable-debug-command", "yes"]


def digest(c: redis.Redis):
    return c.execute_command("DEBUG", "DIGEST")


def test_failover_never_exceeds_confirmed_admissions():
    master = Server(with_module=True, extra=DATA)
    replica = Server(with_module=True, extra=DATA + ["--replicaof", "127.0.0.1", str(master.port)])
    rejoined = None
    sentinels = None
    try:
        replica.linked()
        sentinels = Sentinels(SERVICE, master.port)
        client = Sentinel([("127.0.0.1", p) for p in sentinels.ports]).master_for(SERVICE)
        sw = SlidingWindow(client, confirm=(1, 100), timeout=0.5)
        key = "rl:{failover}"
        confirmed, unconfirmed, errors = [], [0], [0]
        lock = threading.Lock()
        stop = threading.Event()

        def traffic():
            while not stop.is_set():
                try:
                    r = sw.allow(key, LIMIT, detail=True)
                except UnavailableError:
                    with lock:
                        errors[0] += 1
                    stop.wait(0.01)
                    continue
                with lock:
                    if r.confirmed:
                        confirmed.append(r.now)
                    elif r.confirmed is False:
                        unconfirmed[0] += 1

        threads = [threading.Thread(target=traffic) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            wait_for("confirmed admissions before the failure", lambda: len(confirmed) >= 300, 30)
            # The replica falls behind: admissions now go unacknowledged and are taken back.
            replica.proc.send_signal(signal.SIGSTOP)
            wait_for("unconfirmed admissions while the replica is stopped", lambda: unconfirmed[0] >= 3)
            master.proc.kill()
            master.proc.wait()
            replica.proc.send_signal(signal.SIGCONT)
            wait_for("the failover to the replica", lambda: sentinels.master_port() == replica.port, 60)
            before = len(confirmed)
            # Without a replica nothing is confirmed; the killed master comes back as a replica of
            # the new one (never empty and writable), and confirmations resume. With priority 0, as
            # docs/operating.md says: Sentinel promoted it while still empty when the new master
            # missed its pings for a second (seen under load).
            rejoined = Server(with_module=True, extra=DATA + ["--replicaof", "127.0.0.1", str(replica.port),
                                                              "--replica-priority", "0"], port=master.port)
            rj = rejoined.linked("the restarted master's link", 30)
            wait_for("confirmed admissions after the failover", lambda: len(confirmed) >= before + 300, 60)
        finally:
            stop.set()
            for t in threads:
                t.join()
        new_master = replica.client()
        assert new_master.info("replication")["role"] == "master"
        wait_for("the restarted master equal to the new master", lambda: digest(rj) == digest(new_master), 30)
        assert rj.zrange(key, 0, -1, withscores=True) == new_master.zrange(key, 0, -1, withscores=True)
        assert busiest(sorted(confirmed), LIMIT.window * 1000) <= LIMIT.max
        assert unconfirmed[0] >= 3 and errors[0] >= 1
        print(f"\nconfirmed {len(confirmed)}, unconfirmed (taken back) {unconfirmed[0]}, calls failed {errors[0]}, "
              f"busiest confirmed window {busiest(sorted(confirmed), 1000)} of {LIMIT.max}")
    finally:
        if sentinels is not None:
            sentinels.close()
        for s in (master, replica, rejoined):
            if s is not None:
                if s.proc is not None:
                    s.proc.send_signal(signal.SIGCONT)
                s.close()
