"""The README's Envoy bootstrap snippet is a valid Envoy v3 Bootstrap: parsed with Envoy's own
protos (envoy-data-plane), every typed_config unpacked, no unknown field; and its rate limit
filter points at a cluster that speaks HTTP/2."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
import envoy_data_plane.envoy.extensions.filters.http.ratelimit.v3  # noqa: F401 (registers the types)
import envoy_data_plane.envoy.extensions.filters.http.router.v3  # noqa: F401
import envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3  # noqa: F401
import envoy_data_plane.envoy.extensions.upstreams.http.v3  # noqa: F401
from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap

README = Path(__file__).resolve().parents[1] / "README.md"


def test_bootstrap_snippet_parses_as_envoy_config():
    blocks = re.findall(r"```yaml\n(static_resources:.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1
    bootstrap = Bootstrap.from_dict(yaml.safe_load(blocks[0]))
    hcm = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.unpack()
    names = [f.name for f in hcm.http_filters]
    assert names == ["envoy.filters.http.ratelimit", "envoy.filters.http.router"]
    for f in hcm.http_filters:
        f.typed_config.unpack()
    rl = hcm.http_filters[0].typed_config.unpack()
    assert rl.domain == "shop"
    cluster = rl.rate_limit_service.grpc_service.envoy_grpc.cluster_name
    (c,) = [c for c in bootstrap.static_resources.clusters if c.name == cluster]
    options = c.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].unpack()
    assert options.explicit_http_config.http2_protocol_options is not None
    actions = hcm.route_config.virtual_hosts[0].routes[0].route.rate_limits
    assert [a.actions[0].request_headers or a.actions[0].generic_key for a in actions]
