"""FabricConfig: a node's fabric links persisted with the node's own network stack.

Which stack is read from the node when the resource runs, not declared: where netplan is
installed (Ubuntu, DGX OS, Debian's cloud images) it owns the network and the links go into its
files; a Debian without it gets systemd-networkd's. So a simulated node and a real DGX OS node
take the same code path, each to its own files (the simulator builds nodes of both kinds).

After writing, the stack is told to apply its files and the links are *polled* until they read as
declared: seed 001 saw a config apply drop an address for a few seconds.
"""

from __future__ import annotations

import shlex
import time
from typing import Any, Literal

import pulumi
from pulumi.dynamic import CheckFailure

from sparkrack.asking import gather
from sparkrack.facts.files import directories_under, file_state
from sparkrack.facts.links import LinkState, all_links
from sparkrack.facts.os_release import os_family
from sparkrack.facts.units import unit_state
from sparkrack.resources.base import PULUMI_MODULE, Live, NodeProvider, NodeResource, Props
from sparkrack.resources.files import (
    remove_directories,
    remove_file,
    sha256_of,
    write_file,
)
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

Renderer = Literal["networkd", "netplan"]
POLL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.5
NETWORKD_UNITS = ("systemd-networkd.socket", "systemd-networkd.service")
SYSTEM_UNITS = "/etc/systemd/system"
NETPLAN = "/usr/sbin/netplan"  # netplan.io's command, on Ubuntu and Debian alike


def renderer_for(family: tuple[str, ...], netplan_installed: bool) -> Renderer:
    """netplan wherever it is installed (it is how Ubuntu, DGX OS and NVIDIA's Spark guides
    configure the ConnectX ports); a Debian without it runs systemd-networkd."""
    if netplan_installed:
        return "netplan"
    if "debian" in family:
        return "networkd"
    raise ValueError(f"no known network stack for ID={family[0]!r} (no {NETPLAN})")


def config_path(renderer: Renderer, netdev: str) -> str:
    if renderer == "netplan":
        return f"/etc/netplan/60-sparkrack-{netdev}.yaml"
    return f"/etc/systemd/network/50-sparkrack-{netdev}.network"


def file_values(link: Props) -> dict[str, Any]:
    """A link's props as its file wants them: the MTU a whole number. Inputs reach a dynamic
    provider as a protobuf Struct, whose only number is a double, so the Plan's 9000 arrives as
    9000.0: networkd would be handed `MTUBytes=9000.0`, and netplan refuses it (`mtu` is an
    unsigned int in its schema)."""
    mtu = int(link["mtu"])
    if mtu != link["mtu"]:
        raise ValueError(f"{link['netdev']}: MTU {link['mtu']!r} is not a whole number")
    return {"netdev": str(link["netdev"]), "mtu": mtu, "address": str(link["address"] or "")}


def networkd_file(link: Props) -> str:
    link = file_values(link)
    # Without carrier (a peer still down) networkd would hold the address back; and a carrier
    # loss must not take it away: the runtime state has to match the file at all times.
    lines = ["# managed by sparkrack", "[Match]", f"Name={link['netdev']}", ""]
    lines += ["[Link]", f"MTUBytes={link['mtu']}", "RequiredForOnline=no", ""]
    lines += ["[Network]", "LinkLocalAddressing=no", "ConfigureWithoutCarrier=yes"]
    lines += ["IgnoreCarrierLoss=yes", "KeepConfiguration=yes"]
    if link["address"]:
        lines.append(f"Address={link['address']}")
    return "\n".join(lines) + "\n"


def netplan_file(link: Props) -> str:
    link = file_values(link)
    body = [
        "# managed by sparkrack",
        "network:",
        "  version: 2",
        "  ethernets:",
        f"    {link['netdev']}:",
        f"      mtu: {link['mtu']}",
        "      dhcp4: false",
        "      link-local: []",
        # as networkd's file says: configured without a carrier, and what udhcpc leased kept
        "      ignore-carrier: true",
        "      critical: true",
    ]
    if link["address"]:
        body.append(f"      addresses: [{link['address']}]")
    return "\n".join(body) + "\n"


def render(renderer: Renderer, link: Props) -> str:
    return netplan_file(link) if renderer == "netplan" else networkd_file(link)


def link_matches(link: Props, state: LinkState | None) -> bool:
    if state is None or not state.up or state.mtu != int(link["mtu"]):
        return False
    return not link["address"] or link["address"] in state.addresses


class FabricConfigProvider(NodeProvider):
    INPUTS = ("links", "persisted")
    STATE = ("persisted",)
    REPLACE = ()
    DERIVED = ("persisted",)

    def identity(self, props: Props) -> str:
        return "fabric network config"

    def validate(self, props: Props) -> list[CheckFailure]:
        keys = {"netdev", "mtu", "address"}
        bad = [link for link in props["links"] if set(link) != keys]
        return [CheckFailure("links", f"want {sorted(keys)} in each: {bad}")] if bad else []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"persisted": True}

    def renderer(self, target: Target) -> Renderer:
        try:
            netplan_installed = gather(target, file_state(NETPLAN)) is not None
            return renderer_for(gather(target, os_family()), netplan_installed)
        except ValueError as error:
            raise SshError(f"{target.where()}: {error}") from None

    def stale_files(self, target: Target, props: Props, renderer: Renderer) -> list[str]:
        stale = []
        for link in props["links"]:
            path = config_path(renderer, link["netdev"])
            found = gather(target, file_state(path))
            if found is None or found.sha256 != sha256_of(render(renderer, link)):
                stale.append(path)
        return stale

    def observe(self, target: Target, props: Props) -> Live | None:
        renderer = self.renderer(target)
        stale = self.stale_files(target, props, renderer)
        running = renderer == "netplan" or self.networkd_running(target)
        return {"persisted": not stale and running, "renderer": renderer, "running": running}

    def networkd_running(self, target: Target) -> bool:
        networkd = gather(target, unit_state("systemd-networkd.service"))
        return networkd.enabled and networkd.active

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        renderer = self.renderer(target)
        was_running = renderer == "netplan" or self.networkd_running(target)
        for link in props["links"]:
            path = config_path(renderer, link["netdev"])
            mode = "0600" if renderer == "netplan" else "0644"  # netplan warns on readable files
            write_file(target, path, render(renderer, link), mode)
        before = gather(target, directories_under(SYSTEM_UNITS)) if not was_running else set()
        ssh.run(target, self.apply_command(renderer, was_running), sudo=True)
        # `enable` made .wants directories that `disable` leaves behind: delete takes them back.
        made = (
            sorted(gather(target, directories_under(SYSTEM_UNITS)) - before)
            if not was_running
            else []
        )
        self.poll(target, props)
        restore = {"renderer": renderer, "networkd_was_running": was_running, "made_dirs": made}
        return {"restore": restore}

    def apply_command(self, renderer: Renderer, running: bool) -> str:
        if renderer == "netplan":
            return "netplan apply"
        if not running:
            return shlex.join(["systemctl", "enable", "--now", "--", *NETWORKD_UNITS])
        return "networkctl reload"

    def poll(self, target: Target, props: Props) -> None:
        """Until every link reads as its file says; a config apply may drop it for a while."""
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while True:
            links = gather(target, all_links())
            wrong = [
                link["netdev"]
                for link in props["links"]
                if not link_matches(link, links.get(link["netdev"]))
            ]
            if not wrong:
                return
            if time.monotonic() > deadline:
                raise SshError(
                    f"{target.where()}: {', '.join(wrong)} not as configured "
                    f"{POLL_TIMEOUT_S:.0f}s after the network config was applied"
                )
            time.sleep(POLL_INTERVAL_S)

    def remove(self, target: Target, props: Props) -> None:
        restore = props.get("restore") or {}
        renderer: Renderer = restore.get("renderer") or self.renderer(target)
        for link in props["links"]:
            remove_file(target, config_path(renderer, link["netdev"]))
        if renderer == "netplan":
            ssh.run(target, "netplan apply", sudo=True)
        elif restore.get("networkd_was_running") is False:
            command = shlex.join(["systemctl", "disable", "--now", "--", *NETWORKD_UNITS])
            ssh.run(target, command, sudo=True)
            remove_directories(target, restore.get("made_dirs") or [])
        else:
            ssh.run(target, "networkctl reload", sudo=True)

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        if before is not None and not before["persisted"]:
            restore = {"renderer": before["renderer"], "networkd_was_running": before["running"]}
            self.remove(target, {**props, "restore": restore})


class FabricConfig(NodeResource, module=PULUMI_MODULE, name="FabricConfig"):
    """Every fabric link of one node, persisted. Outputs: persisted, renderer (netplan/networkd)."""

    persisted: pulumi.Output[bool]
    renderer: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        target: Target,
        links: list[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"links": links, "persisted": None}
        super().__init__(FabricConfigProvider(), name, target, props, opts)
