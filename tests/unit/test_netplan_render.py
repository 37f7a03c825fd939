"""The fabric's persisted network files, judged by the stacks' own tools: netplan's files (Ubuntu,
DGX OS) by `netplan generate`, networkd's (Debian) by what the renderer writes.

The props are the fabric role's, for the shipped gb10-2 stack, handed over as the dynamic-provider
host hands them to FabricConfig: through a protobuf Struct, so every number is a float.

`netplan generate --root-dir` reads and writes only under the root it is given, but it also runs
`systemctl is-system-running` and `udevadm control --reload` on the machine. So it runs in its own
user and mount namespace with a fresh tmpfs on /run: neither the host's systemd nor its udev can
be reached, and nothing can be written to the host's /run. netplan comes from Debian's netplan.io
package, which scripts/dev installs: without it these tests fail rather than skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from google.protobuf import struct_pb2  # type: ignore[import-untyped]  # no stubs
from pulumi.runtime import rpc

from roles.fabric.role import persisted_link
from sparkrack.config.load import load_stack_file
from sparkrack.plan import NodePlan, make_plan
from sparkrack.resources.network import config_path, networkd_file, render

pytestmark = pytest.mark.unit

NETPLAN = Path("/usr/sbin/netplan")  # Debian's netplan.io; not on a non-root user's PATH
ISOLATED = 'mount -t tmpfs sparkrack-netplan /run && exec "$1" generate --root-dir "$2"'


def gb10_nodes() -> tuple[NodePlan, ...]:
    return make_plan(load_stack_file("gb10-2")).nodes


def as_provider_gets(props: dict[str, Any]) -> dict[str, Any]:
    """Props as the dynamic-provider host deserializes a resource's inputs."""
    struct = struct_pb2.Struct()
    struct.update(props)
    received: dict[str, Any] = rpc.deserialize_properties(struct, True)
    return received


def provider_links(node: NodePlan) -> list[dict[str, Any]]:
    """The node's links as FabricConfig's provider receives them."""
    return list(as_provider_gets({"links": [persisted_link(link) for link in node.links]})["links"])


def write_netplan(root: Path, links: list[dict[str, Any]]) -> None:
    """Each link's file where, and with the mode, FabricConfig writes it on an Ubuntu node."""
    for link in links:
        path = root / PurePosixPath(config_path("netplan", link["netdev"])).relative_to("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render("netplan", link))
        path.chmod(0o600)


def netplan_generate(root: Path) -> subprocess.CompletedProcess[str]:
    assert NETPLAN.exists(), f"{NETPLAN} not found: install Debian's netplan.io (scripts/dev does)"
    assert not root.resolve().is_relative_to("/run"), "the root would be under the fresh /run"
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", ISOLATED]
    return subprocess.run(
        [*command, "sh", str(NETPLAN), str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("node", gb10_nodes(), ids=lambda node: node.name)
def test_netplan_generates_every_fabric_port(node: NodePlan, tmp_path: Path) -> None:
    links = provider_links(node)
    assert {type(link["mtu"]) for link in links} == {float}  # as a real provider gets them
    write_netplan(tmp_path, links)

    generated = netplan_generate(tmp_path)

    assert generated.returncode == 0, generated.stdout + generated.stderr
    for link in node.links:
        network = tmp_path / f"run/systemd/network/10-netplan-{link.netdev}.network"
        lines = network.read_text().splitlines()
        assert f"MTUBytes={link.mtu}" in lines
        assert f"Address={link.address}" in lines


def test_netplan_refuses_a_float_mtu(tmp_path: Path) -> None:
    """The file as it was rendered before the MTU was made whole: proof the test above can fail."""
    link = provider_links(gb10_nodes()[0])[0]
    write_netplan(tmp_path, [link])
    path = tmp_path / PurePosixPath(config_path("netplan", link["netdev"])).relative_to("/")
    whole = f"mtu: {int(link['mtu'])}\n"
    path.write_text(path.read_text().replace(whole, f"mtu: {link['mtu']}\n"))
    assert "mtu: 9000.0\n" in path.read_text()

    refused = netplan_generate(tmp_path)

    assert refused.returncode != 0
    assert "invalid unsigned int value '9000.0'" in refused.stderr
    assert not (tmp_path / "run/systemd/network").exists()


def test_networkd_file_has_a_whole_mtu_from_float_props() -> None:
    link = provider_links(gb10_nodes()[0])[0]
    assert link["mtu"] == 9000.0 and isinstance(link["mtu"], float)

    lines = networkd_file(link).splitlines()

    assert "MTUBytes=9000" in lines
    assert not [line for line in lines if line.startswith("MTUBytes=") and line != "MTUBytes=9000"]


def test_a_fractional_mtu_is_refused_not_truncated() -> None:
    link = {**provider_links(gb10_nodes()[0])[0], "mtu": 9000.5}
    with pytest.raises(ValueError, match=r"9000\.5 is not a whole number"):
        render("networkd", link)
