"""Smoke test of a running gateway started with --limit 2/60s (make test-images runs it against
the slidingwindow/gateway image): three requests of one fresh x-api-key answer 200, 200, then 429
with ratelimit-policy, ratelimit and retry-after headers.

    python3 scripts/smoke_gateway.py http://HOST:PORT
"""

import sys
import urllib.error
import urllib.request
import uuid


def get(url: str, key: str):
    req = urllib.request.Request(url, headers={"x-api-key": key})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.headers


url = sys.argv[1].rstrip("/") + "/"
key = f"smoke-{uuid.uuid4().hex}"
got = [get(url, key) for _ in range(3)]
assert [status for status, _ in got] == [200, 200, 429], [status for status, _ in got]
headers = got[2][1]
assert headers["ratelimit-policy"] == '"l0";q=2;w=60', headers["ratelimit-policy"]
assert headers["ratelimit"] == '"l0";r=0;t=60', headers["ratelimit"]
assert 0 < int(headers["retry-after"]) <= 60, headers["retry-after"]
print(f"smoke_gateway: {url}: 200, 200, 429 ({headers['ratelimit']}, retry-after {headers['retry-after']})")
