"""Smoke test of the installed Python package (scripts/test-packages.sh runs it in a clean
virtualenv, outside the source tree): the version it was built as, then three calls of a limit
of 2 on a server with the module (SLIDINGWINDOW.ALLOW) and on one without (the packaged Lua
script). Usage: python smoke.py VERSION MODULE_PORT PLAIN_PORT"""

import importlib.metadata
import sys
import uuid

import redis
import slidingwindow
from slidingwindow import Limit, SlidingWindow

version, module_port, plain_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
assert importlib.metadata.version("slidingwindow") == version, importlib.metadata.version("slidingwindow")
assert sys.prefix in slidingwindow.__file__, f"imported from {slidingwindow.__file__}, not the virtualenv"

for port, command in ((module_port, "slidingwindow.allow"), (plain_port, "evalsha")):
    r = redis.Redis(host="127.0.0.1", port=port)
    sw = SlidingWindow(r)
    key = f"smoke:{{python}}:{uuid.uuid4()}"
    got = [sw.allow(key, Limit(window=60, max=2)) for _ in range(3)]
    assert [g.allowed for g in got] == [True, True, False], got
    assert [g.remaining for g in got] == [1, 0, 0], got
    assert got[2].retry_after_ms > 0, got
    stats = r.info("commandstats")
    assert f"cmdstat_{command}" in stats, sorted(stats)
    print(f"smoke.py: port {port}: allowed, allowed, refused through {command}")
print(f"smoke.py: slidingwindow {version} from {slidingwindow.__file__}: ok")
