"""`sparkrack sim up|down|status STACK`: the simulated cluster from the command line.

`add_parser` hangs the `sim` command on the main CLI's subparsers; each action sets `run`, a
handler taking the parsed arguments and returning the exit status, as every subcommand does.
"""

from __future__ import annotations

import argparse

from sparkrack.cli.options import guarded, progress_printer
from sparkrack.sim import cluster
from sparkrack.sim.keys import ssh_config_path
from sparkrack.sim.monitoring_images import ensure_monitoring_images
from sparkrack.sim.shell import SimError
from sparkrack.sim.stack import topology_for_stack
from sparkrack.sim.standin.image import ensure_standin_image
from sparkrack.sim.topology import SimTopology
from sparkrack.stackspec.errors import SpecError

SAID, SIM_ERRORS = "sparkrack sim", (SimError, SpecError)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = subparsers.add_parser("sim", help="the simulated GB10 cluster on this machine")
    actions = sim.add_subparsers(dest="sim_action", required=True)
    for name, handler, summary in (
        ("up", handle_up, "build or repair the cluster (idempotent)"),
        ("down", handle_down, "remove everything the simulator made for the stack"),
        ("status", handle_status, "nodes, addresses and health (exit 1 when unhealthy)"),
    ):
        action = actions.add_parser(name, help=summary)
        action.add_argument("stack", metavar="STACK", help="a simulated stack, e.g. sim-2")
        action.set_defaults(run=handler)


def topology_for(stack: str) -> SimTopology:
    """The rack as the stack's plan describes it (the same load and plan as `pulumi up`)."""
    return topology_for_stack(stack)


def handle_up(args: argparse.Namespace) -> int:
    return guarded(SAID, SIM_ERRORS, lambda: up_and_report(topology_for(args.stack)))


def up_and_report(topology: SimTopology) -> int:
    progress = progress_printer()
    # The simulated stacks' engine image: built here, loaded on the head by `pulumi up`
    # (serving.engine.source: control), since the simulated nodes reach no registry.
    ensure_standin_image(progress)
    # The monitoring role's images (Prometheus, exporters), loaded onto the nodes the same way.
    ensure_monitoring_images(progress)
    result = cluster.up(topology, progress)
    print(status_table(result))
    print(f"\nssh: ssh -F {ssh_config_path(topology.stack)} {topology.nodes[0].name}")
    return 0 if result.healthy else 1


def handle_down(args: argparse.Namespace) -> int:
    return guarded(SAID, SIM_ERRORS, lambda: down_and_report(topology_for(args.stack)))


def down_and_report(topology: SimTopology) -> int:
    cluster.down(topology, progress_printer())
    print(f"stack {topology.stack}: removed")
    return 0


def handle_status(args: argparse.Namespace) -> int:
    def show() -> int:
        result = cluster.status(topology_for(args.stack))
        print(status_table(result))
        return 0 if result.healthy else 1

    return guarded(SAID, SIM_ERRORS, show)


def status_table(status: cluster.ClusterStatus) -> str:
    rows = [("NODE", "ADDRESS", "CONTAINER", "SYSTEMD", "SSH")]
    rows += [
        (n.name, n.mgmt_address, n.container, n.systemd, "yes" if n.ssh else "no")
        for n in status.nodes
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(0, f"stack {status.stack}: {verdict(status)}")
    lines.append(fabric_line(status))
    updater = status.counter_updater_pid
    lines.append(f"RDMA counter updater: {'pid ' + str(updater) if updater else 'not running'}")
    if status.dhcp_server != "none":
        lines.append(f"DHCP server on the switch: {status.dhcp_server}")
    return "\n".join(lines)


def verdict(status: cluster.ClusterStatus) -> str:
    if status.healthy:
        return "healthy"
    if all(node.container == "missing" for node in status.nodes):
        return f"not up (sparkrack sim up {status.stack})"
    return "NOT healthy"


def fabric_line(status: cluster.ClusterStatus, shown: int = 4) -> str:
    missing = status.missing_links
    if not missing:
        return "fabric: every link wired"
    more = f"; and {len(missing) - shown} more" if len(missing) > shown else ""
    return f"fabric: {len(missing)} missing or mis-wired: " + "; ".join(missing[:shown]) + more
