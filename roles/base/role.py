"""The base role: packages, the cluster in /etc/hosts, the service user, SSH trust from the head,
and, on a node with NVIDIA GPUs, nvidia-container-toolkit and the CDI spec its containers use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi

from roles.common import render, token
from sparkrack.plan import NodePlan, Plan
from sparkrack.resources.blocks import FileBlock, FileBlockArgs
from sparkrack.resources.cdi import CdiSpec, CdiSpecArgs
from sparkrack.resources.keys import HostKeys, SshKey
from sparkrack.resources.packages import Packages
from sparkrack.resources.users import User, UserArgs
from sparkrack.transport.target import Target

ROLE = "base"


def hosts_lines(plan: Plan) -> str:
    return "\n".join(f"{node.address} {node.name}" for node in plan.nodes)


def reachable_addresses(plan: Plan, node: NodePlan) -> list[str]:
    """Every address the head may use for `node`: management first, then its fabric ports; and
    its name where a port leases its address (copies to a lease check the key by that name)."""
    fabric = [link.address.split("/")[0] for link in node.links if link.address]
    leased = any(link.addressing == "dhcp" for link in node.links)
    return [node.address, *fabric, *([node.name] if leased else [])]


def known_hosts_lines(peers: Sequence[tuple[list[str], list[str]]]) -> str:
    """known_hosts lines from (addresses, ['type base64', ...]) per peer."""
    return "\n".join(
        f"{','.join(addresses)} {key}" for addresses, keys in peers for key in sorted(keys)
    )


@dataclass(frozen=True)
class BaseArgs:
    plan: Plan
    node: NodePlan
    # How the program reaches each node of the Plan, by name: this one, and the head's peers,
    # whose host keys it reads.
    targets: Mapping[str, Target]
    head_public_key: pulumi.Output[str] | None = None  # None on the head: it makes the key


class Base(pulumi.ComponentResource):
    """One node's base. Outputs: user (the service user's name); on the head, public_key."""

    user: str
    home: str
    public_key: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: BaseArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        plan, node, head_public_key = args.plan, args.node, args.head_public_key
        config, target = plan.roles.base, args.targets[node.name]
        service = config.service_user
        self.user, self.home, self.public_key = service.name, service.home, None
        child = pulumi.ResourceOptions(parent=self)
        packages = Packages(f"{node.name}-packages", target, list(config.packages), opts=child)
        after_packages = pulumi.ResourceOptions(parent=self, depends_on=[packages])
        hosts = render(ROLE, "hosts", lines=hosts_lines(plan))
        hosts_block = FileBlockArgs(target, "/etc/hosts", config.hosts_block, hosts)
        FileBlock(f"{node.name}-hosts", hosts_block, opts=child)
        user = UserArgs(
            target,
            self.user,
            subuids=service.subuids,
            subgids=service.subgids,
            linger=service.linger,
            memlock_limit=node.memlock_limit,
        )
        self.service_user = User(f"{node.name}-service-user", user, opts=after_packages)
        self.gpu_access(node, target, packages)
        # Trust is a sibling, not a child: the node's other roles wait on the whole Base, and
        # trust needs a peer up (its host keys, the head's key). A stopped peer must fail only
        # the trust, never hold back this node's fabric, pinning and podman.
        trust = Trust(
            f"{node.name}-trust",
            TrustArgs(plan, node, args.targets, self.user, self.home, head_public_key),
            pulumi.ResourceOptions(depends_on=[self.service_user]),
        )
        self.trust, self.public_key = trust, trust.public_key
        self.register_outputs({"user": self.user, "public_key": self.public_key})

    def gpu_access(self, node: NodePlan, target: Target, packages: Packages) -> None:
        """The toolkit (from apt where the profile says so) and the node's CDI spec, generated
        for the loaded driver. Nothing where the profile declares no GPU access (simulated).
        A child of Base: every role of the node waits for it, the engine's GPU most of all."""
        access = node.gpu_access
        if access.kind != "cdi":
            return
        toolkit: list[pulumi.Resource] = []  # preinstalled: the spec's create says if it is not
        if access.toolkit == "apt":
            # Its own resource, so that a node without NVIDIA's apt source still gets its base
            # packages and user, and the error names this package; after the base packages,
            # because two apt runs on one node fight over dpkg's lock.
            after_packages = pulumi.ResourceOptions(parent=self, depends_on=[packages])
            package = [access.toolkit_package]
            toolkit.append(Packages(f"{node.name}-gpu-toolkit", target, package, after_packages))
        spec = CdiSpecArgs(
            target, access.cdi_spec, access.devices, access.toolkit, access.toolkit_package
        )
        CdiSpec(f"{node.name}-cdi", spec, pulumi.ResourceOptions(parent=self, depends_on=toolkit))


@dataclass(frozen=True)
class TrustArgs:
    plan: Plan
    node: NodePlan
    targets: Mapping[str, Target]  # as BaseArgs
    user: str  # the service user
    home: str
    head_public_key: pulumi.Output[str] | None  # None on the head


class Trust(pulumi.ComponentResource):
    """SSH trust from the head: its key and its peers' pinned host keys on the head, the head's
    key authorized on every other node. Output: public_key, on the head."""

    public_key: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: TrustArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        plan, node, targets = args.plan, args.node, args.targets
        super().__init__(f"{token(ROLE)}Trust", name, None, opts)
        self.user, self.home, self.public_key = args.user, args.home, None
        child, target = pulumi.ResourceOptions(parent=self), targets[node.name]
        if node.name == plan.head_node:
            self.public_key = self.trust_from_head(plan, node, targets, child)
        elif args.head_public_key is not None:
            self.authorize_head(node, target, args.head_public_key, child)
        self.register_outputs({"public_key": self.public_key})

    def trust_from_head(
        self,
        plan: Plan,
        node: NodePlan,
        targets: Mapping[str, Target],
        opts: pulumi.ResourceOptions,
    ) -> pulumi.Output[str]:
        """The head's key, and its peers' host keys as read over our pinned connections."""
        key_name, target = plan.roles.base.trust_key_name, targets[node.name]
        key = SshKey(f"{node.name}-trust-key", target, self.user, key_name, opts=opts)
        peers = [peer for peer in plan.nodes if peer.name != node.name]
        read = [
            HostKeys(f"{node.name}-hostkeys-{peer.name}", targets[peer.name], opts=opts)
            for peer in peers
        ]
        addresses = [reachable_addresses(plan, peer) for peer in peers]
        lines = pulumi.Output.all(*[keys.host_keys for keys in read]).apply(
            lambda found: render(
                ROLE,
                "known_hosts",
                lines=known_hosts_lines(list(zip(addresses, found, strict=True))),
            )
        )
        known_hosts = FileBlockArgs(
            target,
            f"{self.home}/.ssh/known_hosts",
            "peers",
            lines,
            mode="0600",
            owner=self.user,
            group=self.user,
        )
        after_key = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[key]))
        FileBlock(f"{node.name}-known-hosts", known_hosts, after_key)
        return key.public_key

    def authorize_head(
        self,
        node: NodePlan,
        target: Target,
        public_key: pulumi.Output[str],
        opts: pulumi.ResourceOptions,
    ) -> None:
        authorized = FileBlockArgs(
            target,
            f"{self.home}/.ssh/authorized_keys",
            "head",
            public_key.apply(lambda key: f"{key}\n"),
            mode="0600",
            owner=self.user,
            group=self.user,
        )
        FileBlock(f"{node.name}-authorized-head", authorized, opts)
