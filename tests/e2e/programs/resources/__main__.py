"""The e2e program for sparkrack's node resources: a few of each on every node of a sim stack.

Config (namespace `e2e`): nodes (JSON list of {name, address}), user, keyPath, knownHosts,
fencePort (an NftTable answers it on each node's address only), generation (optional, changes
one file's content); the second node's service user also gets a PodmanSecret;
`files` (default 0) adds that many extra RemoteFiles per node and `only` = "files" keeps just
those (the benchmark of the dynamic-provider host's concurrency).
"""

from __future__ import annotations

import json

import pulumi

from sparkrack.plan.fence import FENCE_TABLE, Fence
from sparkrack.resources.availability import fail_after, say_unavailable
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.resources.firewall import NftTable, NftTableArgs
from sparkrack.resources.links import Link, LinkArgs
from sparkrack.resources.podman_secret import PodmanSecret
from sparkrack.resources.sysctls import Sysctl
from sparkrack.resources.units import Unit, UnitArgs
from sparkrack.resources.users import User, UserArgs
from sparkrack.transport.target import Target

UNIT_FILE = """[Unit]
Description=sparkrack e2e: a service the Unit resource keeps running

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
"""

SECRET = "sparkrack-e2e-secret"

config = pulumi.Config("e2e")
nodes = json.loads(config.require("nodes"))
extra_files = config.get_int("files") or 0
only_files = config.get("only") == "files"
generation = config.get("generation")  # set by a test to change the file's content
fence_port = config.require_int("fencePort")
service_user = config.require(
    "serviceUser"
)  # made by `up`: not the login user  # answered on each node's address only


def target(node: dict[str, str]) -> Target:
    return Target(
        node=node["name"],
        host=node["address"],
        port=22,
        user=config.require("user"),
        key_path=config.require("keyPath"),
        known_hosts=config.require("knownHosts"),
    )


def node_resources(index: int, node: dict[str, str]) -> list[pulumi.Resource]:
    name, to = node["name"], target(node)
    made: list[pulumi.Resource] = [
        RemoteFile(
            f"{name}-bench-{n}",
            RemoteFileArgs(to, f"/etc/sparkrack-e2e/bench-{n}.conf", f"n={n}\n"),
        )
        for n in range(extra_files)
    ]
    if only_files:
        return made
    # The service user does not exist before `up` (the owner logs in as another account, as on
    # every real rack): it is made here, and the file owned by its group comes after it.
    ids = ["1000000000:65536"]
    user = User(f"{name}-user", UserArgs(to, service_user, subuids=ids, subgids=ids))
    made.append(user)
    conf = f"node={name}" + (f" generation={generation}" if generation else "")
    made.append(
        RemoteFile(
            f"{name}-conf",
            RemoteFileArgs(
                to, "/etc/sparkrack-e2e/app.conf", f"{conf}\n", "0640", group=service_user
            ),
            pulumi.ResourceOptions(depends_on=[user]),
        )
    )
    made.append(
        RemoteFile(
            f"{name}-token",
            RemoteFileArgs(
                to,
                "/etc/sparkrack-e2e/token",
                pulumi.Output.secret(f"not-a-real-token-{name}"),
                "0600",
                secret=True,
            ),
        )
    )
    unit_path = "/etc/systemd/system/sparkrack-e2e.service"
    unit_file = RemoteFile(f"{name}-unit-file", RemoteFileArgs(to, unit_path, UNIT_FILE))
    unit = Unit(
        f"{name}-unit",
        UnitArgs(to, "sparkrack-e2e.service"),
        pulumi.ResourceOptions(depends_on=[unit_file]),
    )
    made += [unit_file, unit]
    made.append(
        Link(
            f"{name}-port0",
            LinkArgs(to, "enp1s0f0np0", 9000, [f"198.19.{70 + index}.{index + 1}/24"]),
        )
    )
    made.append(Sysctl(f"{name}-somaxconn", to, "net.core.somaxconn", "8192"))
    fence = Fence(
        address=node["address"],
        rack_ports=((fence_port, fence_port),),
        client_ports=(),
        rack=(node["address"],),
        clients=(),
    )
    rules = list(fence.rules)
    table = NftTableArgs(to, "inet", FENCE_TABLE, rules, fence.script)
    made.append(NftTable(f"{name}-fence", table))
    if index == 1:  # one is enough: its drift is a reboot's, not linger's (spark-1 loses that)
        value = pulumi.Output.secret(f"not-a-real-password-{name}")
        after = pulumi.ResourceOptions(depends_on=[user])
        made.append(PodmanSecret(f"{name}-secret", to, service_user, SECRET, value, after))
    return made


# As the real program does: a node that cannot be used is said once and left alone.
unavailable = say_unavailable(target(node) for node in nodes)
made = [r for index, node in enumerate(nodes) for r in node_resources(index, node)]
fail_after(unavailable, made)
