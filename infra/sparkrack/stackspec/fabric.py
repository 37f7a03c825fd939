"""The fabric: cable endpoints, cables, the switch and its ports, MTU and addressing."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    Field,
    model_validator,
)

from sparkrack.stackspec.base import StrictModel, network_kind
from sparkrack.text.spectext import (
    NodeName,
    ShortName,
)


def _parse_endpoint(value: object) -> object:
    if isinstance(value, str):
        node, _, port = value.partition(":")
        return {"node": node, "port": port or None}
    return value


class Endpoint(StrictModel):
    """`node:port`, or just `node` for the first port of its hardware."""

    node: NodeName
    port: ShortName | None = None


EndpointRef = Annotated[Endpoint, BeforeValidator(_parse_endpoint)]


class Cable(StrictModel):
    """A direct cable. Crossed cables (port 0 to port 1) are normal: declare what is plugged."""

    a: EndpointRef
    b: EndpointRef


class SwitchPort(StrictModel):
    name: ShortName
    breakout: int = Field(default=1, ge=1, le=8, description="nodes one port carries")
    nodes: tuple[EndpointRef, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _fits_breakout(self) -> SwitchPort:
        if len(self.nodes) > self.breakout:
            raise ValueError(f"{len(self.nodes)} nodes on a port with breakout {self.breakout}")
        return self


class SwitchSpec(StrictModel):
    name: ShortName = "switch"
    max_mtu: int = Field(default=9216, ge=1280, description="the usual switch jumbo maximum")
    ports: tuple[SwitchPort, ...] = Field(min_length=1)


class FabricSpec(StrictModel):
    mtu: int = Field(default=9000, ge=1280)
    addressing: Literal["static", "dhcp"] = "static"
    subnet: ipaddress.IPv4Network | None = Field(
        default=None,
        description="carved into one /24 per link or switch rail: static addresses are taken "
        "from it; with DHCP, each rail's lease is checked to fall in its /24",
    )
    cables: tuple[Cable, ...] = ()
    switch: SwitchSpec | None = None
    # What verification's RDMA write test (perftest's ib_write_bw, one per cable half) must reach.
    # A GB10 port's half is PCIe x4 (seed 001: 107.8 Gb/s of RoCE per rail), a GX10's second half
    # x2: 25 Gb/s fails a link that trained down or a half that is not carrying RDMA at all.
    rdma_floor_gbps: float = Field(default=25.0, gt=0, le=1600)

    @model_validator(mode="after")
    def _one_topology_and_a_pool(self) -> FabricSpec:
        if self.cables and self.switch:
            raise ValueError("declare either cables or a switch, not both")
        if not self.cables and not self.switch:
            raise ValueError("declare the cables or the switch the nodes are plugged into")
        if self.addressing == "dhcp" and not self.switch:
            # A direct cable joins two boxes and nothing else: no DHCP server is on it.
            raise ValueError("dhcp addressing needs a switch (its DHCP server); cables are static")
        if self.addressing == "static" and self.subnet is None:
            raise ValueError("static addressing needs a subnet to allocate from")
        return self

    @model_validator(mode="after")
    def _a_pool_for_links(self) -> FabricSpec:
        if self.subnet is not None and self.subnet.prefixlen > 24:
            raise ValueError(f"subnet {self.subnet} is smaller than one /24")
        if self.subnet is not None and (kind := network_kind(self.subnet)):
            raise ValueError(f"subnet {self.subnet} holds {kind} addresses, which no link can have")
        return self

    def endpoints(self) -> Iterator[tuple[str, Endpoint]]:
        """Every plugged endpoint with its field path."""
        for i, cable in enumerate(self.cables):
            yield f"fabric.cables[{i}].a", cable.a
            yield f"fabric.cables[{i}].b", cable.b
        for i, port in enumerate(self.switch.ports if self.switch else ()):
            for j, endpoint in enumerate(port.nodes):
                yield f"fabric.switch.ports[{i}].nodes[{j}]", endpoint
