"""What every part of the spec is made of: the strict model, and value types that take
what people write (sizes, parameter counts, CPU lists, ports, host names or addresses)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
)

from sparkrack.text.cpus import CpuList


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must not silently become a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_PARAM_SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_PARAM_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([KMBT]?)\s*")


def _parse_param_count(value: object) -> object:
    # YAML 1.1 reads "2.8e12" as a string, so accept it and the readable "2.8T" alike.
    if isinstance(value, str) and (match := _PARAM_COUNT.fullmatch(value)):
        return float(match[1]) * _PARAM_SUFFIXES[match[2]]
    return value


ParamCount = Annotated[float, BeforeValidator(_parse_param_count), Field(gt=0)]

_SIZE_TEXT = re.compile(r"\s*[0-9]*\.?[0-9]+\s*[A-Za-z]*\s*")


def _size_text(value: object) -> object:
    # pydantic says "could not parse value and unit" of a negative size, and of a typo alike.
    negative = isinstance(value, int | float) and value < 0
    if negative or (isinstance(value, str) and value.strip().startswith("-")):
        raise ValueError(f"{value!r} is negative: a size is a number of bytes, 0 or more")
    if isinstance(value, str) and not _SIZE_TEXT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a size: a number and a unit, like '121.6 GiB' or '122 GB'"
        )
    return value


Size = Annotated[ByteSize, BeforeValidator(_size_text)]

# A TCP port a listener takes or a client reaches: the one range every port field is held to.
Port = Annotated[int, Field(ge=1, le=65535)]


def _some_cpus(cpus: CpuList) -> CpuList:
    if not cpus:
        raise ValueError("a CPU list needs at least one CPU")
    return cpus


# A CPU list as a stack names one: some CPUs, in any spelling (the kernel's, collapsed, is kept).
SomeCpus = Annotated[CpuList, AfterValidator(_some_cpus)]

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9-]+)*"
)


# Addresses that are never one node's own. 0.0.0.0 as a management address made every listener
# the Plan puts there (the API among them) a wildcard one; loopback would be this machine.
_NOT_A_NODE = {
    "unspecified": ("0.0.0.0/8", "::/128"),
    "loopback": ("127.0.0.0/8", "::1/128"),
    "link-local": ("169.254.0.0/16", "fe80::/10"),
    "multicast": ("224.0.0.0/4", "ff00::/8"),
    "broadcast": ("255.255.255.255/32",),
}
NOT_A_NODE = {
    kind: tuple(ipaddress.ip_network(net) for net in nets) for kind, nets in _NOT_A_NODE.items()
}


def address_kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Which kind of address that no node has this is (loopback, multicast, ...), else None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return next(
        (kind for kind, nets in NOT_A_NODE.items() if any(address in net for net in nets)), None
    )


def network_kind(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    """The kind of no-node's address a network holds any of, else None."""
    return next(
        (
            kind
            for kind, nets in NOT_A_NODE.items()
            for net in nets
            if net.version == network.version and network.overlaps(net)
        ),
        None,
    )


def _client_network(value: str) -> str:
    try:
        network = ipaddress.ip_network(value)
    except ValueError as error:
        raise ValueError(f"{value!r} is not a network in CIDR form: {error}") from None
    if kind := network_kind(network):
        raise ValueError(f"{network} holds {kind} addresses, which no client has")
    return str(network)


# A network the API and the dashboards answer (the node fence admits its sources), as CIDR.
ClientNetwork = Annotated[str, AfterValidator(_client_network)]


def _address(value: str) -> str:
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if re.fullmatch(r"[0-9.]+", value):
            raise ValueError(f"{value!r} is not an IPv4 address (a typo?)") from None
        if _HOSTNAME.fullmatch(value):
            return _host_name(value)
        raise ValueError(f"{value!r} is neither an IP address nor a host name") from None
    if kind := address_kind(address):
        article = "an" if kind[0] in "aeiou" else "a"
        raise ValueError(f"{value} is {article} {kind} address, no node's own: give its address")
    return str(address)


def _host_name(value: str) -> str:
    if value.lower().rstrip(".") == "localhost" or value.lower().endswith(".localhost"):
        raise ValueError(f"{value!r} names the loopback address: give the node's own address")
    return value


Address = Annotated[str, AfterValidator(_address)]
