"""The Python suites' one harness (the Python helper's and the Envoy service's tests): real
redis-server processes with the module, a cluster of them and Redis Sentinels, each on a free
loopback port in a fresh directory, killed and removed by close().

Binaries: $REDIS_SERVER (else redis-server on PATH), $REDIS_CLI (else redis-cli); module:
$SLIDINGWINDOW_MODULE, else the release build at the repository root (an editable install, as
the Makefile's targets make, keeps this package in the repository).
"""

from slidingwindow_testkit.servers import (
    DEADLINE_S,
    REPO,
    Cluster,
    Server,
    command_calls,
    free_port,
    module_path,
    named_server,
    wait_for,
)
from slidingwindow_testkit.sentinels import Sentinels

__all__ = ["DEADLINE_S", "REPO", "Cluster", "Sentinels", "Server", "command_calls", "free_port", "module_path", "named_server",
           "wait_for"]
