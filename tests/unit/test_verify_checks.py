"""Every testinfra check in sparkrack.verify.checks passes on the captured good state and fails
on a wrong value: the checks run against testinfra's own Host over a fake backend that answers
each exact, quoted command from golden outputs recorded on a simulated node (tests/unit/golden)."""

from __future__ import annotations

import ast
import copy
import json
import re
import shlex
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from testinfra.backend.base import BaseBackend, CommandResult
from testinfra.host import Host

from sparkrack.config.load import spec_from_config
from sparkrack.facts import Fact
from sparkrack.facts.defaults import assignments
from sparkrack.facts.gpu import gpus_in
from sparkrack.facts.http import http_status, served_models
from sparkrack.facts.links import link_state
from sparkrack.facts.metrics import exporter_collectors, prometheus_api, response_time
from sparkrack.facts.nft import nft_table
from sparkrack.facts.perftest import FIRST_PORT, client_command, server_command
from sparkrack.facts.ping import arp_reply, jumbo_ping_command
from sparkrack.facts.podman import container, image_id, log_file, rootless
from sparkrack.facts.proc import irq_affinity, memlock
from sparkrack.facts.ray import FAILED, alive_nodes
from sparkrack.facts.rdma import gid_attrs, rdma_devices
from sparkrack.facts.sockets import listening_sockets
from sparkrack.facts.sysctl import sysctl_value
from sparkrack.facts.units import config_age, unit_state
from sparkrack.facts.users import linger, subids
from sparkrack.plan import make_plan
from sparkrack.plan.fence import FENCE_TABLE
from sparkrack.stackspec import GpuAccess
from sparkrack.verify.checks import test_cpu as cpu
from sparkrack.verify.checks import test_fabric as fabric
from sparkrack.verify.checks import test_inference as inference
from sparkrack.verify.checks import test_listeners as listeners
from sparkrack.verify.checks import test_monitoring as monitoring
from sparkrack.verify.checks import test_podman as podman
from sparkrack.verify.checks.subjects import Container, Hosts, Link, Node, subjects
from sparkrack.verify.inventory import (
    Inventory,
    build_inventory,
    cabled_rdma_devices,
    scrape_settle_s,
)
from tests.unit.support import STACKS, captured_output, cluster, plan_of

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "debian13-verify-checks.json"
# The RDMA sysfs reads, typed to the kernel's shape: on a sim node they would read the
# simulator's own fake tree (golden/README.md).
RDMA_ANSWERS = Path(__file__).parent / "golden" / "hand-written-rdma-answers.json"
Outputs = dict[str, dict[str, list[Any]]]  # node -> command -> [exit status, stdout]


class FakeBackend(BaseBackend):  # type: ignore[misc]
    """Answers only the commands it was given; anything else is a test bug, said loudly."""

    NAME = "fake"

    def __init__(self, name: str, outputs: dict[str, list[Any]]) -> None:
        super().__init__(name)
        self.outputs = outputs

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        line = self.get_command(command, *args)
        if line not in self.outputs:
            raise KeyError(f"{self.hostname}: no golden output for {line!r}")
        status, stdout = self.outputs[line]
        if isinstance(stdout, list):  # answers in turn, the last one for good
            stdout = stdout.pop(0) if len(stdout) > 1 else stdout[0]
        return self.result(status, self.encode(line), stdout, "")


@cache
def golden() -> Outputs:
    outputs: Outputs = json.loads(GOLDEN.read_text())
    for node, answers in json.loads(RDMA_ANSWERS.read_text()).items():
        outputs[node] |= answers
    return outputs


@cache
def inventory(api_key: bool = False) -> Inventory:
    """sim-2's plan on the /24 the golden outputs were recorded on; with `api_key`, as a stack
    that sets sparkrack:apiKey plans it."""
    raw = cluster("sim-2")
    for node in raw["nodes"]:
        node["address"] = node["address"].replace("198.18.0.", "198.18.6.")
    spec = spec_from_config("sim-2", raw, base_dir=STACKS, api_key=api_key)
    return build_inventory(make_plan(spec))


class Cluster:
    def __init__(self) -> None:
        self.outputs = copy.deepcopy(golden())
        self.hosts = Hosts(lambda name: Host(FakeBackend(name, self.outputs[name])))

    def answer(self, node: str, command: str, stdout: str | list[str], status: int = 0) -> None:
        self.outputs[node][command] = [status, stdout]

    def edit(self, node: str, command: str, change: Callable[[str], str]) -> None:
        status, stdout = self.outputs[node][command]
        self.outputs[node][command] = [status, change(stdout)]

    def run(
        self,
        check: Callable[..., None],
        fixture: str,
        subject_id: str,
        api_key: bool = False,
        inventory_: Inventory | None = None,
    ) -> None:
        planned = inventory_ or inventory(api_key)
        subject = next(s for s in subjects(planned)[fixture] if s.id == subject_id)
        given = {
            "host": self.hosts[subject.node.name],
            "hosts": self.hosts,
            "inventory": planned,
            fixture: subject,
        }
        names = check.__code__.co_varnames[: check.__code__.co_argcount]
        check(**{name: given[name] for name in names})


def ran(fact: Fact[Any], user: str | None = None) -> str:
    """The command line the checks' host runs for a fact: as `user`, or wrapped by host.sudo()."""
    if user is not None:
        return fact.as_user(user).command
    return f"sudo /bin/sh -c {shlex.quote(fact.command)}" if fact.sudo else fact.command


def fails(
    cluster: Cluster,
    check: Callable[..., None],
    fixture: str,
    subject: str,
    api_key: bool = False,
    inventory_: Inventory | None = None,
) -> str:
    with pytest.raises(AssertionError) as failure:
        cluster.run(check, fixture, subject, api_key, inventory_)
    return str(failure.value)


# Where a check may run a command itself: the one reader of facts, and the ping whose exit status
# is its verdict (facts/ping.py parses it with the status).
OWN_COMMANDS = {
    ("readings", "read"),
    ("test_fabric", "test_jumbo_ping"),
    ("test_fabric", "test_rdma_write_bandwidth"),
}


def commands_run(path: Path) -> set[tuple[str, str]]:
    """(module, function) of every `.run(...)` / `.check_output(...)` call in a checks module."""
    functions = [f for f in ast.walk(ast.parse(path.read_text())) if isinstance(f, ast.FunctionDef)]
    return {
        (path.stem, function.name)
        for function in functions
        for call in ast.walk(function)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("run", "check_output")
    }


def test_checks_read_a_node_only_through_facts() -> None:
    """Issue 15: a check reads what a resource reads, with the same command and parser."""
    checks = Path(cpu.__file__).parent
    ran_here = set().union(*(commands_run(path) for path in checks.glob("*.py")))
    assert ran_here == OWN_COMMANDS


# --- fabric -----------------------------------------------------------------------------------

LINK = ("link", "spark-2-enp1s0f0np0")
ADDR = link_state("enp1s0f0np0").command  # as the link checks read it


ARP_IGNORE = ran(sysctl_value("net.ipv4.conf.all.arp_ignore"))


def test_fabric_sysctls_pass_as_planned() -> None:
    Cluster().run(fabric.test_fabric_sysctls, "node", "spark-1")


def test_fabric_sysctls_fail_on_arp_flux() -> None:
    fake = Cluster()
    fake.answer("spark-2", ARP_IGNORE, "0\n")
    message = fails(fake, fabric.test_fabric_sysctls, "node", "spark-2")
    assert message.startswith("net.ipv4.conf.all.arp_ignore = 0, want 1")


def test_link_checks_pass_on_the_configured_port() -> None:
    for check in (fabric.test_link_up, fabric.test_link_mtu, fabric.test_link_address):
        Cluster().run(check, *LINK)
    Cluster().run(fabric.test_connected_route, *LINK)


def test_link_up_fails_on_a_down_port() -> None:
    fake = Cluster()
    set_down = '"flags":["BROADCAST","MULTICAST"],'
    fake.edit("spark-2", ADDR, lambda out: re.sub(r'"flags":\[[^]]*\],', set_down, out, count=1))
    fake.edit("spark-2", ADDR, lambda out: out.replace('"operstate":"UP"', '"operstate":"DOWN"'))
    assert "enp1s0f0np0 is set down (DOWN), want UP" in fails(fake, fabric.test_link_up, *LINK)


def test_link_up_without_a_carrier_names_the_far_end() -> None:
    fake = Cluster()
    fake.edit("spark-2", ADDR, lambda out: out.replace('"operstate":"UP"', '"operstate":"DOWN"'))
    message = fails(fake, fabric.test_link_up, *LINK)
    assert "enp1s0f0np0 is up without a carrier (DOWN): its cable or the far end (spark-1:" in (
        message
    )


def test_link_mtu_fails_on_1500() -> None:
    fake = Cluster()
    fake.edit("spark-2", ADDR, lambda out: out.replace('"mtu":9000', '"mtu":1500'))
    assert "enp1s0f0np0 MTU 1500, want 9000" in fails(fake, fabric.test_link_mtu, *LINK)


def test_link_address_fails_on_another_address() -> None:
    fake = Cluster()
    fake.edit("spark-2", ADDR, lambda out: out.replace("198.19.2.2", "198.19.2.9"))
    message = fails(fake, fabric.test_link_address, *LINK)
    assert "has 198.19.2.9/24, want 198.19.2.2/24" in message


def leased(network: str) -> Link:
    """The checked link as if DHCP-addressed, its lease to fall in `network`."""
    subject = next(s for s in subjects(inventory())["link"] if s.id == LINK[1])
    return Link(subject.node, subject.link.model_copy(update={"address": None, "network": network}))


def test_a_dhcp_lease_is_checked_against_its_rails_network() -> None:
    host = Cluster().hosts["spark-2"]
    fabric.test_link_address(host, leased("198.19.2.0/24"))
    with pytest.raises(AssertionError) as outside:
        fabric.test_link_address(host, leased("198.19.7.0/24"))
    assert "enp1s0f0np0 leased 198.19.2.2/24, outside 198.19.7.0/24" in str(outside.value)


def test_connected_route_fails_when_lost() -> None:
    fake = Cluster()
    fake.answer("spark-2", "ip -j route show dev enp1s0f0np0", "[]\n")
    message = fails(fake, fabric.test_connected_route, *LINK)
    assert "no connected route to 198.19.2.0/24" in message


CABLE = ("cable", "spark-1-enp1s0f0np0")


def test_cable_checks_pass_on_the_declared_cable() -> None:
    Cluster().run(fabric.test_jumbo_ping, *CABLE)
    Cluster().run(fabric.test_cable_peer, *CABLE)


PING = jumbo_ping_command("enp1s0f0np0", "198.19.0.2", 8972)
PING_TOO_LONG = """\
PING 198.19.0.2 (198.19.0.2) from 198.19.0.1 enp1s0f0np0: 8972(9000) bytes of data.
ping: sendmsg: Message too long
ping: sendmsg: Message too long
ping: sendmsg: Message too long

--- 198.19.0.2 ping statistics ---
3 packets transmitted, 0 received, +3 errors, 100% packet loss, time 410ms
"""


def test_jumbo_ping_fails_without_a_reply() -> None:
    fake = Cluster()
    fake.answer("spark-1", PING, PING_TOO_LONG, 1)
    message = fails(fake, fabric.test_jumbo_ping, *CABLE)
    assert "spark-2:enp1s0f1np1 (198.19.0.2): no reply to a 8972-byte" in message
    assert "(sendmsg: Message too long; 3 packets transmitted" in message  # facts/ping's why


# A DGX Spark pair's ib_write_bw on rocep1s0f0 (a public gb10-training guide's capture): the
# table verification reads. The cable half spark-1:enp1s0f0np0 is the sim-2 plan's first ping.
GB10_WRITE_BW = """\
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      20000            111.62             111.61             0.212877
---------------------------------------------------------------------------------------
"""
WRITE_BW_PORT = FIRST_PORT  # the first cable half's


def write_bw_cluster(client_output: str) -> Cluster:
    fake = Cluster()
    server = server_command("rocep1s0f1", 3, WRITE_BW_PORT)
    fake.answer("spark-2", server, "")
    client = client_command("rocep1s0f0", 3, WRITE_BW_PORT, "198.19.0.2")
    fake.answer("spark-1", client, client_output)
    return fake


def test_rdma_write_bandwidth_passes_at_a_gb10s_figure_then_fails_below_the_floor() -> None:
    write_bw_cluster(GB10_WRITE_BW).run(fabric.test_rdma_write_bandwidth, *CABLE)
    slow = GB10_WRITE_BW.replace("111.61", "0.01   ")
    message = fails(write_bw_cluster(slow), fabric.test_rdma_write_bandwidth, *CABLE)
    assert message.startswith(
        "rocep1s0f0 (enp1s0f0np0) -> spark-2:rocep1s0f1 (enp1s0f1np1, 198.19.0.2): 0.01 Gb/s, "
        "below the stack's floor of 0.05 Gb/s (fabric.rdma_floor_gbps)"
    )


def test_rdma_write_bandwidth_fails_when_no_queue_pair_connects() -> None:
    refused = " Failed to modify QP to RTR\n Couldn't connect to 198.19.0.2:18515\n"
    message = fails(write_bw_cluster(refused), fabric.test_rdma_write_bandwidth, *CABLE)
    assert message.startswith(
        "rocep1s0f0 (enp1s0f0np0) -> spark-2:rocep1s0f1 (enp1s0f1np1, 198.19.0.2): no RDMA write "
        "measured: Couldn't connect to 198.19.0.2:18515\n"
    )


def no_arp_reply(address: str) -> str:
    """What arping prints when nobody answers (it exits 1; the fact's `|| true` makes it 0)."""
    return (
        f"ARPING {address} from 198.19.0.1 enp1s0f0np0\n"
        "Sent 2 probes (2 broadcast(s))\nReceived 0 response(s)\n"
    )


def test_cable_peer_fails_on_a_swapped_cable() -> None:
    """The address answers, but from the peer's other port: the ping alone would pass."""
    fake = Cluster()
    links = json.loads(fake.outputs["spark-2"]["ip -j link show"][1])
    other = next(link["address"] for link in links if link["ifname"] == "enp1s0f0np0")
    arping = ran(arp_reply("enp1s0f0np0", "198.19.0.2"))
    fake.answer("spark-1", arping, f"Unicast reply from 198.19.0.2 [{other.upper()}]  0.5ms\n")
    message = fails(fake, fabric.test_cable_peer, *CABLE)
    assert message.startswith(
        "enp1s0f0np0 reaches spark-2:enp1s0f0np0, but the cable map says spark-2:enp1s0f1np1"
    )


def test_cable_peer_names_the_port_that_answers_for_its_own_address() -> None:
    """ARP answered only on the owning port: the planned address is silent, and the peer's port
    that is really there answers for its own address."""
    fake = Cluster()
    links = json.loads(fake.outputs["spark-2"]["ip -j link show"][1])
    there = next(link["address"] for link in links if link["ifname"] == "enp1s0f0np0")
    for address in ("198.19.0.2", "198.19.1.2", "198.19.2.2", "198.19.3.2"):
        fake.answer("spark-1", ran(arp_reply("enp1s0f0np0", address)), no_arp_reply(address))
    fake.answer(
        "spark-1",
        ran(arp_reply("enp1s0f0np0", "198.19.2.2")),
        f"Unicast reply from 198.19.2.2 [{there.upper()}]  0.5ms\n",
    )
    message = fails(fake, fabric.test_cable_peer, *CABLE)
    assert message.startswith(
        "enp1s0f0np0 reaches spark-2:enp1s0f0np0, but the cable map says spark-2:enp1s0f1np1"
    )


def test_cable_peer_fails_when_no_port_answers() -> None:
    fake = Cluster()
    for address in ("198.19.0.2", "198.19.1.2", "198.19.2.2", "198.19.3.2"):
        fake.answer("spark-1", ran(arp_reply("enp1s0f0np0", address)), no_arp_reply(address))
    message = fails(fake, fabric.test_cable_peer, *CABLE)
    assert message.startswith(
        "enp1s0f0np0: no ARP reply from 198.19.0.2 nor from spark-2's other ports"
    )


RDMA = ("rdma", "spark-1-rocep1s0f0")
RDMA_DEVICES = ran(rdma_devices())


def test_rdma_checks_pass_on_a_roce_port() -> None:
    for check in (fabric.test_rdma_device, fabric.test_rdma_port_active):
        Cluster().run(check, *RDMA)
    Cluster().run(fabric.test_rdma_gid_roce_v2, *RDMA)


def test_rdma_device_fails_when_absent() -> None:
    fake = Cluster()
    fake.edit("spark-1", RDMA_DEVICES, lambda out: out.replace("rocep1s0f0 4: ACTIVE\n", ""))
    assert "no RDMA device rocep1s0f0" in fails(fake, fabric.test_rdma_device, *RDMA)


def test_rdma_port_fails_when_down() -> None:
    fake = Cluster()
    down = "rocep1s0f0 1: DOWN"
    fake.edit("spark-1", RDMA_DEVICES, lambda out: out.replace("rocep1s0f0 4: ACTIVE", down))
    message = fails(fake, fabric.test_rdma_port_active, *RDMA)
    assert "port 1 is '1: DOWN', want ACTIVE" in message


def test_rdma_gid_fails_on_roce_v1() -> None:
    fake = Cluster()
    fake.answer("spark-1", ran(gid_attrs("rocep1s0f0", 3)), "IB/RoCE v1\nenp1s0f0np0\n")
    message = fails(fake, fabric.test_rdma_gid_roce_v2, *RDMA)
    assert "GID 3 is 'IB/RoCE v1' on enp1s0f0np0, want 'RoCE v2'" in message


# --- cpu --------------------------------------------------------------------------------------

NODE = ("node", "spark-1")
HEAD_CONTAINER = ("container", "spark-1-ray-head")


IRQBALANCE = ran(assignments("/etc/default/irqbalance"))


def test_irqbalance_banned_passes_then_fails_on_a_wrong_list() -> None:
    Cluster().run(cpu.test_irqbalance_banned, *NODE)
    fake = Cluster()
    fake.answer("spark-1", IRQBALANCE, "IRQBALANCE_BANNED_CPULIST=0-1\n")
    message = fails(fake, cpu.test_irqbalance_banned, *NODE)
    assert "irqbalance bans '0-1' in /etc/default/irqbalance, want '1'" in message


def test_irqbalance_banned_fails_without_the_file() -> None:
    fake = Cluster()
    fake.answer("spark-1", IRQBALANCE, "")  # cat found nothing: the fact's `|| true` says so
    assert "irqbalance bans 'no cores'" in fails(fake, cpu.test_irqbalance_banned, *NODE)


IRQBALANCE_STATE = ran(unit_state("irqbalance.service"))
IRQBALANCE_AGE = ran(config_age("irqbalance.service", ("/etc/default/irqbalance",)))
RUNNING = "LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n"
STARTED = "ActiveEnterTimestamp=Sun 2026-12-06 12:17:21.552862 UTC\n"


def irqbalance_cluster(written_at: str) -> Cluster:
    fake = Cluster()
    fake.answer("spark-1", IRQBALANCE_STATE, RUNNING)
    fake.answer("spark-1", IRQBALANCE_AGE, f"{STARTED}{written_at} /etc/default/irqbalance\n")
    return fake


def test_irqbalance_runs_its_ban_passes_then_fails_on_a_ban_written_after_its_start() -> None:
    irqbalance_cluster("1796559400.000000000").run(cpu.test_irqbalance_runs_its_ban, *NODE)
    message = fails(irqbalance_cluster("1796559445.1"), cpu.test_irqbalance_runs_its_ban, *NODE)
    assert message.startswith("irqbalance.service started before its config changed")


def test_irqbalance_runs_its_ban_fails_when_it_does_not_run() -> None:
    fake = irqbalance_cluster("1796559400.0")
    fake.answer("spark-1", IRQBALANCE_STATE, RUNNING.replace("=active", "=inactive"))
    message = fails(fake, cpu.test_irqbalance_runs_its_ban, *NODE)
    assert message.startswith("irqbalance.service is inactive, want active")


INTERRUPTS = """\
           CPU0       CPU1
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 95:        120          0  ITS-MSI 524288 Edge   mlx5_async0@pci:0000:01:00.0
 96:          0       4411  ITS-MSI 524289 Edge   mlx5_comp0@pci:0000:01:00.0
"""


def run_irq_check(fake: Cluster) -> None:
    """The check on spark-1 as a profile declaring mlx5 NICs (a gb10) would have it."""
    subject = next(s for s in subjects(inventory())["node"] if s.id == "spark-1")
    cpus = subject.node.cpus.model_copy(update={"nic_irqs": "mlx5"})
    node = subject.node.model_copy(update={"cpus": cpus, "hardware": "gb10"})
    cpu.test_nic_irq_affinity(fake.hosts["spark-1"], Node(node, subject.user))


def test_nic_irq_affinity_skips_only_where_the_profile_declares_no_nic_irqs() -> None:
    with pytest.raises(pytest.skip.Exception) as skipped:
        Cluster().run(cpu.test_nic_irq_affinity, *NODE)
    assert str(skipped.value) == "hardware gb10-sim declares nic_irqs: none (no NIC IRQs)"


def test_nic_irq_affinity_fails_where_the_declared_irqs_are_missing() -> None:
    fake = Cluster()
    fake.answer("spark-1", "cat /proc/interrupts", INTERRUPTS.split(" 95:")[0])
    with pytest.raises(AssertionError) as failure:
        run_irq_check(fake)
    assert str(failure.value).startswith(
        "no mlx5 IRQs in /proc/interrupts, yet hardware gb10 declares its NICs raise them"
    )


def test_nic_irq_affinity_passes_on_housekeeping_then_fails_on_compute() -> None:
    fake = Cluster()
    fake.answer("spark-1", "cat /proc/interrupts", INTERRUPTS)
    fake.answer("spark-1", ran(irq_affinity(95)), "0\n")
    fake.answer("spark-1", ran(irq_affinity(96)), "0\n")
    run_irq_check(fake)
    fake.answer("spark-1", ran(irq_affinity(96)), "1\n")
    with pytest.raises(AssertionError) as failure:
        run_irq_check(fake)
    assert str(failure.value).startswith("mlx5 IRQs outside housekeeping 0: IRQ 96 on 1")


def test_irq_pin_applied_fails_on_a_mask_changed_after_it_ran() -> None:
    subject = next(s for s in subjects(inventory())["node"] if s.id == "spark-1")
    cpus = subject.node.cpus.model_copy(update={"nic_irqs": "mlx5"})
    node = Node(subject.node.model_copy(update={"cpus": cpus, "hardware": "gb10"}), subject.user)
    unit = "sparkrack-irq-affinity.service"
    files = ("/usr/local/sbin/sparkrack-irq-affinity", f"/etc/systemd/system/{unit}")
    fake = Cluster()
    fake.answer("spark-1", ran(unit_state(unit)), RUNNING)
    age = ran(config_age(unit, files))
    fake.answer("spark-1", age, f"{STARTED}1796559400.0 {files[0]}\n1796559401.0 {files[1]}\n")
    cpu.test_irq_pin_applied(fake.hosts["spark-1"], inventory(), node)
    fake.answer("spark-1", age, f"{STARTED}1796559400.0 {files[0]}\n1796559445.0 {files[1]}\n")
    with pytest.raises(AssertionError) as failure:
        cpu.test_irq_pin_applied(fake.hosts["spark-1"], inventory(), node)
    assert str(failure.value).startswith(f"{unit} started before its config changed")


def test_container_cpuset_fails_where_podman_ignored_it() -> None:
    """Recorded as it is: rootless Podman on the sim's cgroup v1 dropped --cpuset-cpus."""
    message = fails(Cluster(), cpu.test_container_cpuset, *HEAD_CONTAINER)
    assert "ray-head runs on cores '0-1', want compute cores '1'" in message


def test_container_cpuset_passes_on_the_compute_cores() -> None:
    fake = Cluster()
    status = next(c for c in fake.outputs["spark-1"] if "/status" in c)
    fake.edit(
        "spark-1",
        status,
        lambda out: out.replace("Cpus_allowed_list:\t0-1", "Cpus_allowed_list:\t1"),
    )
    fake.run(cpu.test_container_cpuset, *HEAD_CONTAINER)


def exporter_on(cores: str) -> Cluster:
    """spark-1's node-exporter, its inspect record the recorded ray-head's under its own name
    and PID, its process allowed on `cores`."""
    fake = Cluster()
    head = next(c for c in fake.outputs["spark-1"] if "container inspect ray-head" in c)
    status = next(c for c in fake.outputs["spark-1"] if "/status" in c)
    record = json.loads(fake.outputs["spark-1"][head][1])
    record[0]["Name"], record[0]["State"]["Pid"] = "node-exporter", 4242
    fake.answer("spark-1", head.replace("ray-head", "node-exporter"), json.dumps(record))
    answer = fake.outputs["spark-1"][status][1].replace(
        "Cpus_allowed_list:\t0-1", f"Cpus_allowed_list:\t{cores}"
    )
    fake.answer("spark-1", status.replace("/705/", "/4242/"), answer)
    return fake


def test_exporter_cpuset_holds_the_exporters_to_the_housekeeping_cores() -> None:
    exporter = ("exporter", "spark-1-node-exporter")
    exporter_on("0").run(cpu.test_exporter_cpuset, *exporter)
    message = fails(exporter_on("1"), cpu.test_exporter_cpuset, *exporter)
    assert "node-exporter runs on cores '1', want housekeeping cores '0'" in message


# --- podman -----------------------------------------------------------------------------------


def test_service_user_checks_pass_on_the_sim_user() -> None:
    for check in (podman.test_service_user_subids, podman.test_service_user_linger):
        Cluster().run(check, *NODE)
    Cluster().run(podman.test_user_manager_memlock, *NODE)


def test_service_user_subids_fail_without_a_range() -> None:
    fake = Cluster()
    fake.answer("spark-1", ran(subids("subgid")), "other:100000:65536\n")
    message = fails(fake, podman.test_service_user_subids, *NODE)
    assert message.startswith("sparkrack has no range in /etc/subgid")


def test_service_user_linger_fails_when_off() -> None:
    fake = Cluster()
    fake.answer("spark-1", ran(linger("sparkrack")), "Linger=no\n")
    assert "sparkrack does not linger" in fails(fake, podman.test_service_user_linger, *NODE)


def test_user_manager_memlock_fails_on_the_default_limit() -> None:
    fake = Cluster()
    limits = next(c for c in fake.outputs["spark-1"] if c.endswith("/limits"))
    fake.edit("spark-1", limits, lambda out: out.replace("8388608", "65536"))
    message = fails(fake, podman.test_user_manager_memlock, *NODE)
    assert "memlock soft 65536, hard 65536, want 8388608" in message


USER = "sparkrack"  # the service user, also the sim's SSH user
INSPECT = ran(container("ray-head"), USER)


def inspect_edit(fake: Cluster, change: Callable[[dict[str, Any]], None]) -> None:
    record = json.loads(fake.outputs["spark-1"][INSPECT][1])
    change(record[0])
    fake.answer("spark-1", INSPECT, json.dumps(record))


def test_container_checks_pass_on_the_planned_container() -> None:
    for check in (
        podman.test_container_running,
        podman.test_container_rootless,
        podman.test_container_host_network,
        podman.test_container_env,
        podman.test_nccl_ib_disable_absent,
    ):
        Cluster().run(check, *HEAD_CONTAINER)


def test_container_running_fails_when_stopped() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: r["State"].update(Running=False, Status="exited"))
    assert "ray-head is exited" in fails(fake, podman.test_container_running, *HEAD_CONTAINER)


def test_container_running_fails_when_absent() -> None:
    fake = Cluster()
    fake.answer("spark-1", INSPECT, "")  # podman says 'no such container' on stderr only
    message = fails(fake, podman.test_container_running, *HEAD_CONTAINER)
    assert "no container ray-head for user sparkrack" in message


def test_container_rootless_fails_under_root_podman() -> None:
    fake = Cluster()
    fake.answer("spark-1", ran(rootless(), USER), "false\n")
    message = fails(fake, podman.test_container_rootless, *HEAD_CONTAINER)
    assert "sparkrack's podman is not rootless" in message


def test_container_host_network_fails_on_a_bridge() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: r["HostConfig"].update(NetworkMode="bridge"))
    message = fails(fake, podman.test_container_host_network, *HEAD_CONTAINER)
    assert "ray-head network bridge" in message


def replace_env(record: dict[str, Any], key: str, value: str | None) -> None:
    env = [e for e in record["Config"]["Env"] if not e.startswith(f"{key}=")]
    record["Config"]["Env"] = env + ([f"{key}={value}"] if value is not None else [])


def test_container_env_fails_on_a_tampered_value() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: replace_env(r, "NCCL_IB_HCA", "rocep1s0f0"))
    message = fails(fake, podman.test_container_env, *HEAD_CONTAINER)
    assert "NCCL_IB_HCA='rocep1s0f0' (want 'rocep1s0f0,roceP2p1s0f0')" in message


def test_container_env_fails_on_an_unplanned_nccl_variable() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: replace_env(r, "NCCL_NET_GDR_LEVEL", "0"))
    message = fails(fake, podman.test_container_env, *HEAD_CONTAINER)
    assert "not planned: NCCL_NET_GDR_LEVEL" in message


def test_nccl_ib_disable_fails_when_set() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: replace_env(r, "NCCL_IB_DISABLE", "1"))
    message = fails(fake, podman.test_nccl_ib_disable_absent, *HEAD_CONTAINER)
    assert "ray-head sets NCCL_IB_DISABLE=1" in message


PLANNED_DEVICES = ["--device=nvidia.com/gpu=all", "--device=/dev/infiniband"]


def test_container_devices_fail_where_it_was_created_without_them() -> None:
    """Recorded as it is: the recorded container was started by hand, with no device."""
    message = fails(Cluster(), podman.test_container_devices, *HEAD_CONTAINER)
    assert message.startswith(
        "ray-head was created without nvidia.com/gpu=all (no GPU in it: vLLM stops at start-up);"
        " /dev/infiniband (NCCL would run on TCP sockets (seed 001))"
    )


def test_container_devices_pass_with_the_gpu_and_the_rdma_devices() -> None:
    fake = Cluster()
    inspect_edit(fake, lambda r: r["Config"]["CreateCommand"].extend(PLANNED_DEVICES))
    fake.run(podman.test_container_devices, *HEAD_CONTAINER)
    inspect_edit(fake, lambda r: r["Config"]["CreateCommand"].remove(PLANNED_DEVICES[0]))
    message = fails(fake, podman.test_container_devices, *HEAD_CONTAINER)
    assert message.splitlines()[0] == (
        "ray-head was created without nvidia.com/gpu=all (no GPU in it: vLLM stops at start-up)"
    )


LIMITS = "Max locked memory         {limit}              {limit}              bytes\n"


def test_container_memlock_reads_the_process_limit_against_the_node_declared() -> None:
    fake = Cluster()
    pid = json.loads(fake.outputs["spark-1"][INSPECT][1])[0]["State"]["Pid"]
    fake.answer("spark-1", ran(memlock(pid)), LIMITS.format(limit=8388608))
    fake.run(podman.test_container_memlock, *HEAD_CONTAINER)
    fake.answer("spark-1", ran(memlock(pid)), LIMITS.format(limit=65536))
    message = fails(fake, podman.test_container_memlock, *HEAD_CONTAINER)
    assert message.startswith("ray-head may lock 65536 bytes, want 8388608: NCCL would run on")


def test_image_id_fails_where_each_node_built_its_own() -> None:
    """Recorded as it is: the image was imported on each node, so the ids differ."""
    Cluster().run(podman.test_image_id, *NODE)
    message = fails(Cluster(), podman.test_image_id, "node", "spark-2")
    assert "is 22426ca8e555 here, 9f9fa5acbcd4 on spark-1" in message


def test_image_id_names_the_head_when_its_image_is_not_the_one_the_deploy_made() -> None:
    """Handed the id `up` read on the head, a changed head fails, and its worker passes."""
    fake = Cluster()
    command = ran(image_id("localhost/sparkrack/engine-standin:latest"), USER)
    made = fake.outputs["spark-2"][command][1].strip()
    deployed = inventory().model_copy(update={"engine_image_id": made})
    fake.run(podman.test_image_id, "node", "spark-2", inventory_=deployed)
    message = fails(fake, podman.test_image_id, "node", "spark-1", inventory_=deployed)
    assert f"here, the deploy made {made.removeprefix('sha256:')[:12]}" in message


def test_image_id_passes_when_shipped() -> None:
    fake = Cluster()
    command = ran(image_id("localhost/sparkrack/engine-standin:latest"), USER)
    fake.answer("spark-2", command, fake.outputs["spark-1"][command][1])
    fake.run(podman.test_image_id, "node", "spark-2")


# --- inference (outputs in the shape the Ray node query, vLLM and NCCL print) ---------------

API = ("api", "spark-1")
# What the Ray node query prints: the alive nodes' addresses, after Ray's own warnings.
RAY_ALIVE = 'FutureWarning: Tip: ...\n["198.18.6.11", "198.18.6.12"]\n'
RAY_QUERY = ran(alive_nodes("ray-head"), USER)
MODELS_URL = "http://198.18.6.11:8000/v1/models"
ENGINE_LOG = ran(log_file(inventory().plan.node("spark-1").paths.engine_log), USER)
MODELS = '{"object":"list","data":[{"id":"minimax-m2.7-awq","object":"model"}]}'
IB_LINE = "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enP7s7<0>"
# spark-2's HCAs are its port 1's halves: the far end of the (crossed) cable from spark-1's port 0.
IB_LINE_2 = IB_LINE.replace("p1s0f0", "p1s0f1")
NCCL_LOG = (
    "INFO 12-02 10:00:01 [standin] NCCL version 2.27.3+cuda13.0\n"
    f"spark-1:41:41 [0] {IB_LINE}\nspark-2:52:52 [0] {IB_LINE_2}\n"
)


def k8s_file(log: str) -> str:
    """`log` as Podman's k8s-file driver writes it (the engine log's file on the head)."""
    stamp = "2026-12-02T10:00:01.000000000+00:00"
    return "".join(f"{stamp} stderr F {line}\n" for line in log.splitlines())


def inference_cluster(ray: str = RAY_ALIVE, models: str = MODELS, log: str = NCCL_LOG) -> Cluster:
    fake = Cluster()
    fake.answer("spark-1", RAY_QUERY, ray)
    fake.answer("spark-1", ran(served_models(MODELS_URL), USER), models)
    fake.answer("spark-1", ENGINE_LOG, log if log == "#absent\n" else k8s_file(log))
    return fake


def test_inference_checks_pass_on_a_serving_cluster() -> None:
    inference_cluster().run(inference.test_ray_node_count, *API)
    inference_cluster().run(inference.test_model_served, *API)
    for node in ("spark-1", "spark-2"):
        inference_cluster().run(inference.test_nccl_transport, "node", node)


def test_ray_node_count_fails_with_a_missing_worker() -> None:
    fake = inference_cluster(ray=RAY_ALIVE.replace(', "198.18.6.12"', ""))
    message = fails(fake, inference.test_ray_node_count, *API)
    assert message.startswith("Ray has 1 alive nodes; missing spark-2 (198.18.6.12)")


def test_ray_node_count_fails_with_a_stranger() -> None:
    fake = inference_cluster(ray=RAY_ALIVE.replace("]", ', "198.18.6.99"]'))
    message = fails(fake, inference.test_ray_node_count, *API)
    assert message.startswith("Ray has nodes outside the Plan: 198.18.6.99")


def test_ray_node_count_fails_when_the_query_fails() -> None:
    fake = inference_cluster()
    no_container = 'Error: no container with name or ID "ray-head" found: no such container'
    fake.answer("spark-1", RAY_QUERY, f"{no_container}\n{FAILED}\n")
    message = fails(fake, inference.test_ray_node_count, *API)
    assert message.startswith(f"Ray node query in ray-head failed: {no_container}")


KEY_SECRET = "sparkrack-api-key"


def keyed_cluster(without: str, keyed: str) -> Cluster:
    """The API's answers to /v1/models without a key and with the one in its Podman secret."""
    fake = inference_cluster()
    fake.answer("spark-1", ran(served_models(MODELS_URL, KEY_SECRET), USER), MODELS)
    fake.answer("spark-1", ran(http_status(MODELS_URL)), without)
    fake.answer("spark-1", ran(http_status(MODELS_URL, KEY_SECRET), USER), keyed)
    return fake


def test_the_api_key_check_passes_on_401_without_and_200_with_the_key() -> None:
    assert inventory(api_key=True).plan.serving.api_key_secret == KEY_SECRET
    keyed_cluster("401", "200").run(inference.test_the_api_asks_for_its_key, *API, api_key=True)
    # and the model check asks with the key, from the secret, as the service user
    keyed_cluster("401", "200").run(inference.test_model_served, *API, api_key=True)


def test_the_api_key_check_fails_on_an_api_open_without_it_or_refusing_it() -> None:
    check = inference.test_the_api_asks_for_its_key
    message = fails(keyed_cluster("200", "200"), check, *API, api_key=True)
    assert message.startswith(f"{MODELS_URL} without a key answered 200, not 401")
    message = fails(keyed_cluster("000", "000"), check, *API, api_key=True)
    assert message.startswith(f"{MODELS_URL} without a key answered nothing, not 401")
    message = fails(keyed_cluster("401", "401"), check, *API, api_key=True)
    assert message.startswith(f"{MODELS_URL} with the key of {KEY_SECRET} answered 401")


def test_the_api_key_check_skips_a_stack_without_a_key() -> None:
    with pytest.raises(pytest.skip.Exception):
        keyed_cluster("200", "200").run(inference.test_the_api_asks_for_its_key, *API)


def test_model_served_fails_on_another_model() -> None:
    fake = inference_cluster(models=MODELS.replace("minimax-m2.7-awq", "gemma-3-27b"))
    message = fails(fake, inference.test_model_served, *API)
    assert "serves ['gemma-3-27b'], want minimax-m2.7-awq" in message


def test_model_served_fails_when_nothing_answers() -> None:
    message = fails(inference_cluster(models=""), inference.test_model_served, *API)
    assert message.startswith(f"{MODELS_URL} did not answer")


def test_nccl_transport_fails_without_the_engine_log() -> None:
    message = fails(inference_cluster(log="#absent\n"), inference.test_nccl_transport, *NODE)
    path = inventory().plan.node("spark-1").paths.engine_log
    assert message.startswith(f"no engine log {path} on spark-1")


def test_nccl_transport_fails_on_one_hca() -> None:
    one = NCCL_LOG.replace(
        "spark-2:52:52 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE ",
        "spark-2:52:52 [0] NCCL INFO NET/IB : Using ",
    )
    message = fails(inference_cluster(log=one), inference.test_nccl_transport, "node", "spark-2")
    assert "missing ['rocep1s0f1']" in message


def test_nccl_transport_names_both_ends_of_a_queue_pair_that_found_no_path() -> None:
    plan = inventory().plan  # the link addresses the names come from
    here, there = plan.node("spark-1").links[0], plan.node("spark-2").links[0]
    local, remote = (str(link.address).split("/")[0] for link in (here, there))
    miss = (
        "spark-1:41:44 [0] NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, "
        f"on dev {here.rdma_device}:1, curr state INIT, next state RTR, local GID index 3, "
        f"local GID ::ffff:{local}, remote GID ::ffff:{remote}\n"
    )
    fake = inference_cluster(log=NCCL_LOG + miss)
    message = fails(fake, inference.test_nccl_transport, "node", "spark-1")
    assert message.startswith(
        f"NCCL's queue pairs found no path: spark-1 {here.netdev} ({here.rdma_device}, {local}) "
        f"to spark-2 {there.netdev} ({remote}): 110 Connection timed out"
    )


def test_an_engine_restarting_after_nccl_refused_it_is_named_with_what_nccl_said() -> None:
    """A refused engine restarts (its unit): between its start line and NCCL's init the running
    start says nothing, so the start before speaks; it never passes on an older start's words."""
    plan = inventory().plan
    here, there = plan.node("spark-1").links[0], plan.node("spark-2").links[0]
    local, remote = (str(link.address).split("/")[0] for link in (here, there))
    start = "INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.27.1\n"
    miss = (
        "spark-1:41:44 [0] NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, "
        f"on dev {here.rdma_device}:1, curr state INIT, next state RTR, local GID index 3, "
        f"local GID ::ffff:{local}, remote GID ::ffff:{remote}\n"
    )
    refused = inference_cluster(log=start + NCCL_LOG + miss + start)
    message = fails(refused, inference.test_nccl_transport, "node", "spark-1")
    assert message.startswith(
        "no NCCL line from spark-1 since the engine's last start; at the start before, NCCL's "
        f"queue pairs found no path: spark-1 {here.netdev} ({here.rdma_device}, {local}) to "
        f"spark-2 {there.netdev} ({remote})"
    )
    healthy_before = inference_cluster(log=start + NCCL_LOG + start)
    message = fails(healthy_before, inference.test_nccl_transport, "node", "spark-2")
    assert message.startswith("no NCCL line from spark-2 since the engine's last start")
    assert "at the start before" not in message


def test_nccl_transport_fails_on_a_socket_fallback() -> None:
    log = NCCL_LOG + "spark-2:52:52 [0] NCCL INFO NET/Socket : Using [0]enP7s7:198.18.6.12<0>\n"
    message = fails(inference_cluster(log=log), inference.test_nccl_transport, "node", "spark-2")
    assert message.startswith("NCCL fell back to sockets")


# --- GPUs in the engine containers (hand-written `nvidia-smi -L` answers, added per test: the
# recorded sim's goldens predate its GPU devices) ------------------------------------------

GB10_GPU = "GPU 0: NVIDIA GB10 (UUID: GPU-6b3c0d7e-2f4a-5e1b-9c8d-0a1b2c3d4e5f)\n"
ENGINE_CONTAINERS = ("spark-1-ray-head", "spark-1-vllm", "spark-2-ray-worker")


def run_gpu_check(fake: Cluster, subject_id: str, **view: Any) -> None:
    """The check on a container subject whose node's Plan is changed (a GB10's, say)."""
    subject = next(s for s in subjects(inventory())["container"] if s.id == subject_id)
    node = subject.node.model_copy(update=view)
    checked = Container(node, subject.user, subject.container)
    inference.test_container_gpus(fake.hosts[node.name], checked)


def gpu_cluster(answer: str = GB10_GPU) -> Cluster:
    fake = Cluster()
    for subject in subjects(inventory())["container"]:
        fake.answer(subject.node.name, ran(gpus_in(subject.container.name), USER), answer)
    return fake


GB10 = {"hardware": "gb10", "gpu_access": GpuAccess(kind="cdi"), "gpus": 1}


def test_container_gpus_skip_only_where_the_profile_declares_no_gpu() -> None:
    assert [s.id for s in subjects(inventory())["container"]] == list(ENGINE_CONTAINERS)
    cpu_only = {"hardware": "cpu-box", "gpu_access": GpuAccess(kind="none"), "gpus": 1}
    for subject_id in ENGINE_CONTAINERS:
        with pytest.raises(pytest.skip.Exception) as skipped:
            run_gpu_check(Cluster(), subject_id, **cpu_only)
        assert str(skipped.value) == "hardware cpu-box declares gpu_access.kind: none"


def test_container_gpus_are_checked_on_the_simulated_gb10() -> None:
    """The simulated profile declares CDI access like a gb10: the check runs there too."""
    for subject_id in ENGINE_CONTAINERS:
        subject = next(s for s in subjects(inventory())["container"] if s.id == subject_id)
        assert (subject.node.hardware, subject.node.gpu_access.kind) == ("gb10-sim", "cdi")
        run_gpu_check(gpu_cluster(), subject_id)


def test_container_gpus_pass_when_each_engine_container_sees_its_gpu() -> None:
    for subject_id in ENGINE_CONTAINERS:
        run_gpu_check(gpu_cluster(), subject_id, **GB10)


def test_container_gpus_fail_when_the_container_sees_none() -> None:
    fake = gpu_cluster("No devices were found\n#failed\n")
    with pytest.raises(AssertionError) as failure:
        run_gpu_check(fake, "spark-1-vllm", **GB10)
    assert str(failure.value).startswith("nvidia-smi -L in vllm failed: No devices were found")


def test_container_gpus_fail_on_fewer_than_the_profile_declares() -> None:
    with pytest.raises(AssertionError) as failure:
        run_gpu_check(gpu_cluster(), "spark-2-ray-worker", **(GB10 | {"gpus": 2}))
    assert str(failure.value).startswith("ray-worker sees 1 GPUs, want 2 (hardware gb10): GPU 0")


# --- monitoring -------------------------------------------------------------------------------

PROMETHEUS = "http://198.18.6.11:9090/api/v1"
TARGETS = ran(prometheus_api(f"{PROMETHEUS}/targets", "state=active"))
SERIES = ran(prometheus_api(f"{PROMETHEUS}/series", monitoring.RDMA_SERIES))
FILE_AGE = ran(prometheus_api(f"{PROMETHEUS}/query", monitoring.RDMA_FILE_AGE))
EXPORTER = "http://198.18.6.11:9100/metrics"  # spark-1's
METRICS = ran(exporter_collectors(EXPORTER))
SCRAPE_TIME = ran(response_time(EXPORTER))


def prometheus_cluster(
    down: str = "", devices_on_spark2: tuple[str, ...] = (), spark2_age: float = 4.0
) -> Cluster:
    fake = Cluster()
    targets = [
        {
            "labels": {"job": t.job, "instance": t.target},
            "health": "down" if t.target == down else "up",
        }
        for t in inventory().plan.monitoring.targets
    ]
    fake.answer(
        "spark-1", TARGETS, json.dumps({"status": "success", "data": {"activeTargets": targets}})
    )
    series = [
        {
            "__name__": f"sparkrack_rdma_port_{way}_bytes_total",
            "device": device,
            "port": "1",
            "instance": f"{node.address}:9100",
            "node": node.name,
        }
        for node in inventory().nodes
        for device in (
            cabled_rdma_devices(node)
            if node.name == "spark-1" or not devices_on_spark2
            else devices_on_spark2
        )
        for way in ("xmit", "rcv")
    ]
    fake.answer("spark-1", SERIES, json.dumps({"status": "success", "data": series}))
    fake.answer("spark-1", FILE_AGE, rdma_file_ages(spark2_age))
    return fake


def rdma_file_ages(spark2_age: float) -> str:
    """Prometheus's answer to the age of each node's rdma.prom: 3 s on the head."""
    ages = {"spark-1": 3.0, "spark-2": spark2_age}
    result = [
        {"metric": {"node": node, "file": "/textfile/rdma.prom"}, "value": [1.7e9, str(age)]}
        for node, age in ages.items()
    ]
    data = {"resultType": "vector", "result": result}
    return json.dumps({"status": "success", "data": data})


def test_monitoring_checks_pass_on_a_healthy_stack() -> None:
    Cluster().run(monitoring.test_node_exporter_scrape_time, *NODE)
    Cluster().run(monitoring.test_node_exporter_collectors, *NODE)
    prometheus_cluster().run(monitoring.test_prometheus_targets, "prometheus", "spark-1")
    prometheus_cluster().run(monitoring.test_rdma_counter_series, "node", "spark-2")


def test_node_exporter_scrape_time_fails_when_slow() -> None:
    fake = Cluster()
    fake.answer("spark-1", SCRAPE_TIME, "200 1.734")
    message = fails(fake, monitoring.test_node_exporter_scrape_time, *NODE)
    assert "took 1.73 s at best of 3 scrapes, want under 1 s" in message


def test_node_exporter_scrape_time_passes_when_a_slow_scrape_was_a_moment_of_load() -> None:
    fake = Cluster()
    fake.answer("spark-1", SCRAPE_TIME, ["200 1.734", "200 0.041"])
    fake.run(monitoring.test_node_exporter_scrape_time, *NODE)


def test_node_exporter_scrape_time_fails_when_nothing_answers() -> None:
    fake = Cluster()
    fake.answer("spark-1", SCRAPE_TIME, "000 5.001")  # curl timed out: no HTTP code
    message = fails(fake, monitoring.test_node_exporter_scrape_time, *NODE)
    assert message.startswith(f"{EXPORTER} did not answer within 5 s, 3 times")


def test_node_exporter_collectors_fail_with_infiniband() -> None:
    fake = Cluster()
    extra = 'node_scrape_collector_success{collector="infiniband"} 1\n'
    fake.edit("spark-1", METRICS, lambda out: out + extra)
    message = fails(fake, monitoring.test_node_exporter_collectors, *NODE)
    assert "node-exporter runs infiniband, which hangs node-exporter under RDMA load" in message


def test_node_exporter_collectors_asks_again_when_the_exporter_is_silent() -> None:
    fake = Cluster()
    status, metrics = fake.outputs["spark-1"][METRICS]
    fake.answer("spark-1", METRICS, ["", metrics], status)
    fake.run(monitoring.test_node_exporter_collectors, *NODE)
    fake.answer("spark-1", METRICS, [""], status)
    message = fails(fake, monitoring.test_node_exporter_collectors, *NODE)
    assert message.startswith(f"{EXPORTER} did not answer, 3 times")


def test_node_exporter_collectors_fail_without_a_planned_one() -> None:
    fake = Cluster()
    fake.edit(
        "spark-1", METRICS, lambda out: out.replace('{collector="pressure"}', '{collector="x"}')
    )
    message = fails(fake, monitoring.test_node_exporter_collectors, *NODE)
    assert "lacks planned collectors pressure" in message


class Clock:
    """time.monotonic and time.sleep for a check that waits: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_prometheus_targets_fail_with_one_down(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    fake = prometheus_cluster(down="198.18.6.12:9835")
    message = fails(fake, monitoring.test_prometheus_targets, "prometheus", "spark-1")
    assert message.startswith("6/7 targets up; nvidia-gpu 198.18.6.12:9835: down")
    # read again until one scrape interval and timeout (15 s + 10 s in sim-2) have passed
    assert clock.slept >= scrape_settle_s(inventory().plan) > 0


def test_rdma_counter_series_fail_for_a_missing_device(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    fake = prometheus_cluster(devices_on_spark2=("rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1"))
    message = fails(fake, monitoring.test_rdma_counter_series, "node", "spark-2")
    assert "no RDMA counter series for roceP2p1s0f1 rcv, roceP2p1s0f1 xmit" in message
    assert clock.slept >= scrape_settle_s(inventory().plan)  # asked again meanwhile


def test_rdma_counter_series_fail_when_their_collector_stopped_writing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its file left behind: node-exporter serves the last counters, every series is there."""
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    fake = prometheus_cluster(spark2_age=600.0)
    message = fails(fake, monitoring.test_rdma_counter_series, "node", "spark-2")
    assert message.startswith("the RDMA counters on spark-2 were written 600 s ago, want every 5 s")
    assert clock.slept >= scrape_settle_s(inventory().plan)  # asked again meanwhile


def test_rdma_counter_series_fail_when_labelled_for_another_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(monitoring, "time", Clock())
    fake = prometheus_cluster()
    series = json.loads(fake.outputs["spark-1"][SERIES][1])["data"]
    for one in series:
        one["node"] = "spark-1"  # every series scraped from the head: spark-2 has none
    fake.answer("spark-1", SERIES, json.dumps({"status": "success", "data": series}))
    message = fails(fake, monitoring.test_rdma_counter_series, "node", "spark-2")
    assert message.startswith("no RDMA counter series for roceP2p1s0f0 rcv, roceP2p1s0f0 xmit")


SS_SPARK_1 = """\
LISTEN 0      128          0.0.0.0:22        0.0.0.0:*
LISTEN 0      4096    198.18.6.11:9100       0.0.0.0:*
LISTEN 0      4096               *:6379            *:*
LISTEN 0      4096               *:52369           *:*
LISTEN 0      511     127.0.0.53%lo:53       0.0.0.0:*
LISTEN 0      128             [::]:22           [::]:*
LISTEN 0      4096           [::1]:631          [::]:*
"""


def test_ss_lines_read_as_address_and_port() -> None:
    assert listening_sockets(SS_SPARK_1) == [
        ("0.0.0.0", 22),
        ("198.18.6.11", 9100),
        ("*", 6379),
        ("*", 52369),
        ("127.0.0.53", 53),
        ("::", 22),
        ("::1", 631),
    ]


def test_a_planned_socket_holds_only_its_address_or_a_declared_wildcard() -> None:
    head = plan_of("sim-2", cluster("sim-2")).node("spark-1")
    exporter, gcs = head.listener("node-exporter"), head.listener("ray-gcs")
    assert exporter.holds("198.18.0.11", 9100)
    assert not exporter.holds("0.0.0.0", 9100) and not exporter.holds("198.19.0.1", 9100)
    assert gcs.holds("*", 6379) and gcs.holds("198.18.0.11", 6379)  # this Ray: everywhere
    workers = head.listener("ray-workers")
    assert workers.holds("*", 52450) and not workers.holds("*", 52600)


def test_nothing_listens_beyond_the_plan_fails_on_an_exporter_on_every_address() -> None:
    fake = Cluster()
    fake.answer("spark-1", "ss -Hltn", SS_SPARK_1)
    fake.run(listeners.test_nothing_listens_beyond_the_plan, *NODE)
    everywhere = SS_SPARK_1.replace("198.18.6.11:9100", "    0.0.0.0:9100")
    fake.answer("spark-1", "ss -Hltn", everywhere)
    message = fails(fake, listeners.test_nothing_listens_beyond_the_plan, *NODE)
    assert message.startswith("listening where the Plan puts nothing: 0.0.0.0:9100")


def test_a_running_rdma_write_test_is_not_a_service_but_the_port_after_the_last_one_is() -> None:
    """Another node's RDMA write check serves here for its seconds (perftest: every address)."""
    fake = Cluster()
    halves = len(inventory().plan.jumbo_pings)
    serving = f"LISTEN 0      5            0.0.0.0:{FIRST_PORT + halves - 1}      0.0.0.0:*\n"
    fake.answer("spark-1", "ss -Hltn", SS_SPARK_1 + serving)
    fake.run(listeners.test_nothing_listens_beyond_the_plan, *NODE)
    beyond = serving.replace(str(FIRST_PORT + halves - 1), str(FIRST_PORT + halves))
    fake.answer("spark-1", "ss -Hltn", SS_SPARK_1 + beyond)
    message = fails(fake, listeners.test_nothing_listens_beyond_the_plan, *NODE)
    assert message.startswith(
        f"listening where the Plan puts nothing: 0.0.0.0:{FIRST_PORT + halves}"
    )


def test_each_service_listens_fails_naming_the_service_that_does_not() -> None:
    fake = Cluster()
    fake.answer("spark-1", "ss -Hltn", SS_SPARK_1.replace("198.18.6.11:9100", "198.18.6.11:9101"))
    message = fails(fake, listeners.test_each_service_listens_on_its_planned_address, *NODE)
    assert message.startswith("not listening: ") and "node-exporter on 198.18.6.11:9100" in message


def nft_ruleset(case: str, address: str = "198.18.6.") -> str:
    """A captured `nft -j list ruleset` (tests/unit/golden/facts), moved to the management network
    `address` (its first three octets)."""
    return captured_output(f"nft.nft_table.{case}").replace("198.18.0.", address)


def test_the_fence_passes_as_planned_then_fails_flushed_edited_and_absent() -> None:
    fake, command = Cluster(), ran(nft_table("inet", FENCE_TABLE))
    fake.answer("spark-1", command, nft_ruleset("fence-beside-another-table"))
    fake.run(listeners.test_the_node_fence_is_the_plans, *NODE)
    fake.answer("spark-1", command, nft_ruleset("flushed-by-hand"))
    message = fails(fake, listeners.test_the_node_fence_is_the_plans, *NODE)
    assert message.startswith("table inet sparkrack_ray_fence is not the Plan's: holds ")
    assert "answer only on 198.18.6.11, to the rack and its client networks" in message
    # a client network widened by hand to the whole management /16
    widened = nft_ruleset("fence-beside-another-table").replace('"len": 24', '"len": 16')
    fake.answer("spark-1", command, widened)
    message = fails(fake, listeners.test_the_node_fence_is_the_plans, *NODE)
    assert "198.18.6.0/16" in message and "198.18.6.0/24" in message
    fake.answer("spark-1", command, nft_ruleset("absent"))
    message = fails(fake, listeners.test_the_node_fence_is_the_plans, *NODE)
    assert message.startswith("no nftables table inet sparkrack_ray_fence: Ray's GCS")


def test_a_check_needing_a_node_that_does_not_answer_fails_in_one_plain_line() -> None:
    fake = Cluster()
    hosts = Hosts(fake.hosts.__getitem__, {"spark-2": "node spark-2 (198.18.6.12): unreachable"})
    subject = next(s for s in subjects(inventory())["cable"] if s.id == CABLE[1])
    with pytest.raises(pytest.fail.Exception) as failed:
        fabric.test_cable_peer(fake.hosts["spark-1"], hosts, subject)
    assert str(failed.value) == "needs spark-2, which does not answer (its line says why)"
