"""A service's address in the forms its flags and clients take: pure text, shared by the Plan
(listen flags), the resources that ask a service (the API's model list) and verification."""

from __future__ import annotations


def host_port(address: str, port: int) -> str:
    """`address:port`, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def http_url(address: str, port: int, path: str) -> str:
    """A service's URL on its planned address: asked on the node itself too, since nothing
    listens on loopback or a wildcard."""
    return f"http://{host_port(address, port)}{path}"
