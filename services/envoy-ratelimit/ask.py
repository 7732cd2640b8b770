#!/usr/bin/env python3
"""One ShouldRateLimit call from the command line, printed one status a line.

    ask.py HOST:PORT DOMAIN key=value[,key=value...] ... [--hits N]

Each argument after the domain is one descriptor (its entries comma-separated); a descriptor may
end with `@N` (its own hits_addend) or `@-N` (N hits given back: is_negative_hits). Needs the
envoy-data-plane and grpcio packages (`make test-envoy` installs them into target/venv-envoy).
"""

import argparse
import re

import grpc
from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import RateLimitDescriptor, RateLimitDescriptorEntry
from envoy_data_plane.envoy.service.ratelimit.v3 import RateLimitRequest, RateLimitServiceSyncStub


def descriptor(text: str) -> RateLimitDescriptor:
    m = re.fullmatch(r"(.*?)(?:@(-?)(\d+))?", text)
    entries = [RateLimitDescriptorEntry(key=k, value=v) for k, _, v in (e.partition("=") for e in m[1].split(","))]
    d = RateLimitDescriptor(entries=entries)
    if m[3]:
        d.hits_addend, d.is_negative_hits = int(m[3]), m[2] == "-"
    return d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("addr")
    p.add_argument("domain")
    p.add_argument("descriptors", nargs="+")
    p.add_argument("--hits", type=int, default=0, help="the request's hits_addend")
    a = p.parse_args()
    with grpc.insecure_channel(a.addr) as channel:
        req = RateLimitRequest(domain=a.domain, descriptors=[descriptor(d) for d in a.descriptors], hits_addend=a.hits)
        resp = RateLimitServiceSyncStub(channel).should_rate_limit(req)
    print(resp.overall_code.name)
    for text, st in zip(a.descriptors, resp.statuses):
        limit = st.current_limit
        rule = f"{limit.requests_per_unit}/{limit.unit.name.lower()}" if limit else "no limit"
        wait = st.duration_until_reset
        wait = "-" if wait is None else f"{wait.total_seconds():g}s"
        print(f"  {text}: {st.code.name} {rule} remaining={st.limit_remaining} duration_until_reset={wait}")
    for h in resp.response_headers_to_add:
        print(f"  {h.key}: {h.value}")


if __name__ == "__main__":
    main()
