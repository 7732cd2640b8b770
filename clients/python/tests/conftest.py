"""The servers the tests share, from the repository's harness (slidingwindow_testkit, installed
by `make test-python`): one with the module loaded, one without (the Lua path), a cluster of each.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from slidingwindow_testkit import Cluster, Server


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


@pytest.fixture(scope="module", params=["module", "lua"])
def cluster(request):
    """A three-master cluster with the module, and one without it (the script)."""
    c = Cluster(with_module=request.param == "module")
    yield request.param, c
    c.close()


@pytest.fixture(params=["module", "lua"])
def path(request, module_server, plain_server):
    """Each helper test runs twice: on a server with the module, and on one without (the script)."""
    server = module_server if request.param == "module" else plain_server
    return request.param, server


@pytest.fixture
def key() -> str:
    return f"rl:{{{uuid.uuid4().hex}}}"


@pytest.fixture
def settle():
    """Runs an awaitable to its value on the test's own event loop (the asyncio helper's tests)."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()
