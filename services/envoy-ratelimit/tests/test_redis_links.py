"""The links to Redis beyond one plain node: TLS (rediss://) to a redis-server started here with
--tls-port and certificates made here, trusted through --redis-ca-file; and Redis Sentinel (a
master and a replica with the module, three sentinels, all on free loopback ports), failing over
under traffic when the master is killed."""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import threading
import time
from pathlib import Path

import grpc
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponseCode as Code,
    RateLimitServiceSyncStub,
)

from conftest import Service, descriptor, write_config
from slidingwindow_testkit import Sentinels, Server, free_port, module_path, wait_for

CONFIG = """
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"""


def certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 it signed: (ca, cert, key) PEM files."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "envoy-ratelimit test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def served(resp) -> bool:
    """Redis answered for it (a failed call leaves the counted status without a duration)."""
    return resp.statuses[0].duration_until_reset is not None


def test_tls_with_a_ca_file(tmp_path):
    ca, cert, key = certificates(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
         "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
         "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(tmp_path),
         "--loadmodule", module_path()],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )
    tls = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(ca), socket_timeout=10)

    def answers():
        try:
            return tls.ping()
        except redis.ConnectionError:
            return False

    config = write_config(tmp_path, CONFIG)
    try:
        wait_for("redis-server over TLS", answers)
        s = Service(config, f"rediss://127.0.0.1:{port}", "--redis-ca-file", str(ca))
        try:
            for remaining in (999_999, 999_998):
                resp = s.ask("shop", [("user", "t")])
                assert served(resp) and resp.statuses[0].limit_remaining == remaining
            assert tls.zcard("ratelimit:{shop}:user=t") == 2
            wait_for("SERVING", lambda: s.health_status() == "SERVING")
        finally:
            s.close()
        # The system's roots do not know this CA: the link fails, and says why.
        untrusted = Service(config, f"rediss://127.0.0.1:{port}")
        try:
            assert not served(untrusted.ask("shop", [("user", "t")]))
        finally:
            err = untrusted.close()
        assert "redis failed" in err and "certificate" in err.lower()
        # The reference's REDIS_TLS_CACERT names the file too.
        env = {**os.environ, "REDIS_TLS_CACERT": str(ca)}
        by_env = Service(config, f"rediss://127.0.0.1:{port}", env=env)
        try:
            assert served(by_env.ask("shop", [("user", "t")]))
        finally:
            by_env.close()
    finally:
        proc.kill()
        proc.wait()


SERVICE = "rl"


def test_sentinel_failover_under_traffic(tmp_path):
    master = Server()
    replica = Server(extra=["--replicaof", "127.0.0.1", str(master.port)])
    sentinels = s = None
    try:
        rc = replica.client()
        wait_for("the replica's link", lambda: rc.info("replication")["master_link_status"] == "up")
        sentinels = Sentinels(SERVICE, master.port)
        s = Service(write_config(tmp_path, CONFIG), [f"redis://127.0.0.1:{p}" for p in sentinels.ports],
                    "--sentinel", SERVICE)
        answers = []
        stop = threading.Event()

        def traffic(t: int):
            with grpc.insecure_channel(s.addr) as ch:
                stub = RateLimitServiceSyncStub(ch)
                while not stop.is_set():
                    resp = stub.should_rate_limit(RateLimitRequest(domain="shop", descriptors=[descriptor([("user", f"u{t}")])]))
                    assert resp.overall_code == Code.OK
                    answers.append((time.monotonic(), served(resp)))
                    stop.wait(0.005)

        threads = [threading.Thread(target=traffic, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        try:
            wait_for("traffic served by the master", lambda: sum(ok for _, ok in answers) >= 100)
            assert master.client().zcard("ratelimit:{shop}:user=u0") > 0
            master.stop()  # SIGKILL
            killed = time.monotonic()
            wait_for("the failover to the replica", lambda: sentinels.master_port() == replica.port, 60)
            wait_for("traffic served by the new master",
                     lambda: sum(ok for at, ok in answers if at > killed) >= 100, 30)
        finally:
            stop.set()
            for t in threads:
                t.join()
        after = [ok for at, ok in answers if at > killed]
        assert rc.info("replication")["role"] == "master"
        # The new master holds the logs, each request after the failover counted there.
        assert rc.zcard("ratelimit:{shop}:user=u0") > 0
        assert after[-1]
        print(f"\n{len(answers)} answers, {len(after)} after the kill, "
              f"{after.count(False)} of them while no master answered")
    finally:
        err = s.close() if s is not None else ""
        if sentinels is not None:
            sentinels.close()
        master.close()
        replica.close()
    assert "redis failed" in err and "redis answers again" in err
