#!/usr/bin/env python3
"""Checks envoy.yaml against Envoy's own message definitions (the `envoy-data-plane` package):
every key must exist in the v3 API (unknown keys and unknown typed configs are errors), and the
rate limit wiring must match Tollgate's `[[rls.rule]]`: domain `edi`, descriptor keys
`partner` and `document`, fail open, and an HTTP/2 cluster for the gRPC service.

    python3 check_envoy_config.py envoy.yaml
"""
import sys

import yaml

# Importing a package registers its messages for typed_config's "@type".
import envoy_data_plane.envoy.extensions.filters.http.ratelimit.v3 as ratelimit
import envoy_data_plane.envoy.extensions.filters.http.router.v3  # noqa: F401
import envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 as hcm
import envoy_data_plane.envoy.extensions.upstreams.http.v3 as upstreams
from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap


def unpacked(any_message):
    """The message inside a typed_config (`google.protobuf.Any`)."""
    return any_message.unpack()


def check(path):
    with open(path) as f:
        config = Bootstrap().from_dict(yaml.safe_load(f))
    listener = config.static_resources.listeners[0]
    manager = unpacked(listener.filter_chains[0].filters[0].typed_config)
    assert isinstance(manager, hcm.HttpConnectionManager), type(manager)
    filters = {f.name: unpacked(f.typed_config) for f in manager.http_filters}
    limit = filters["envoy.filters.http.ratelimit"]
    assert isinstance(limit, ratelimit.RateLimit), type(limit)
    assert limit.domain == "edi", limit.domain
    assert not limit.failure_mode_deny, "Tollgate down must let traffic through (fail open)"
    assert list(filters)[-1] == "envoy.filters.http.router", "the router filter comes last"
    service = limit.rate_limit_service.grpc_service.envoy_grpc.cluster_name
    clusters = {c.name: c for c in config.static_resources.clusters}
    assert service in clusters, f"no cluster {service}"
    options = unpacked(clusters[service].typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
    assert isinstance(options, upstreams.HttpProtocolOptions), type(options)
    assert options.explicit_http_config.http2_protocol_options is not None, "gRPC needs HTTP/2"
    route = manager.route_config.virtual_hosts[0].routes[0].route
    keys = [a.request_headers.descriptor_key for a in route.rate_limits[0].actions]
    assert keys == ["partner", "document"], keys
    print(f"{path}: valid Envoy v3 bootstrap; rate limit domain edi, descriptors {keys}, fail open")


if __name__ == "__main__":
    check(sys.argv[1] if len(sys.argv) > 1 else "envoy.yaml")
