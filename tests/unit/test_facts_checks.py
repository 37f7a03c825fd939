"""The facts the verification checks read a node through: the parsers' edges that the golden
cases (golden/facts) do not show, and the builders' quoting."""

from __future__ import annotations

import shlex

import pytest

from sparkrack.facts.defaults import assignments, parse_assignments
from sparkrack.facts.metrics import (
    parse_api_data,
    parse_collectors,
    parse_response_time,
    prometheus_api,
)
from sparkrack.facts.nccl_env import QueuePairMiss, nccl_transport
from sparkrack.facts.ping import arp_reply, parse_arp_reply
from sparkrack.facts.podman import container_env, log_file, parse_log_file, parse_rootless
from sparkrack.facts.proc import irq_affinity, parse_irq_affinity
from sparkrack.facts.ray import FAILED, AliveNodes, alive_nodes, parse_alive_nodes_query
from sparkrack.facts.rdma import GidAttrs, gid_attrs, parse_gid_attrs
from sparkrack.facts.units import ConfigAge, main_pid, parse_main_pid
from sparkrack.text.commands import podman_exec

pytestmark = pytest.mark.unit

IB = "NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE [RO]; OOB enP7s7<0>"
SOCKET = "NCCL INFO NET/Socket : Using [0]enP7s7:198.18.6.12<0>"


def test_assignments_skip_comments_and_unquote() -> None:
    text = "# KEY=comment\n  #OFF=1\nA='x y'\nB=\"0-4,10-14\"\nnot an assignment\n C = 2 \n"
    assert parse_assignments(text) == {"A": "x y", "B": "0-4,10-14", "C": "2"}


def test_assignments_quote_the_path_and_never_fail() -> None:
    command = assignments("/etc/default/my file").command
    assert command == "cat -- '/etc/default/my file' 2>/dev/null || true"


def test_irq_affinity_reads_one_irq_and_a_freed_one_as_no_cores() -> None:
    assert irq_affinity(147).command.startswith("cat /proc/irq/147/smp_affinity_list ")
    assert parse_irq_affinity("0-4,10-14\n") == "0-4,10-14"
    assert parse_irq_affinity("") == ""


def test_arp_reply_is_read_as_root_and_lowercased() -> None:
    fact = arp_reply("enp1s0f0np0", "198.19.0.2")
    assert fact.sudo and fact.command.endswith(" || true")
    reply = "Unicast reply from 198.19.0.2 [6E:EC:37:A7:85:C9]  0.531ms\n"
    assert parse_arp_reply(reply) == "6e:ec:37:a7:85:c9"
    assert parse_arp_reply("Received 0 response(s)\n") is None


def test_gid_attrs_reads_both_files_of_one_entry() -> None:
    command = gid_attrs("roce dev", 3).command
    assert "'/sys/class/infiniband/roce dev/ports/1/gid_attrs'/types/3" in command
    assert "'/sys/class/infiniband/roce dev/ports/1/gid_attrs'/ndevs/3" in command
    assert parse_gid_attrs("RoCE v2\nenp1s0f0np0\n") == GidAttrs("RoCE v2", "enp1s0f0np0")
    assert parse_gid_attrs("") == GidAttrs("", "")  # the final newlines trimmed by testinfra


def test_alive_nodes_marks_a_failed_query() -> None:
    assert alive_nodes("ray-head").command.endswith(f"2>&1 || echo {shlex.quote(FAILED)}")
    assert parse_alive_nodes_query(f"{FAILED}\n") == AliveNodes(None, "")
    two = 'warning\n["198.18.6.11", "198.18.6.12"]\n'
    assert parse_alive_nodes_query(two) == AliveNodes(("198.18.6.11", "198.18.6.12"))


def test_an_exec_into_a_container_is_started_by_the_users_manager() -> None:
    # From the SSH session runc would have to raise the session's hard memlock limit to the
    # container's, which a rootless caller cannot; the manager already has the container's.
    argv = shlex.split(podman_exec("ray-head", ["python3", "-c", "print('a b')"]))
    split = argv.index("--")
    by_manager, run = argv[:split], argv[split + 1 :]
    assert by_manager[:2] == ["systemd-run", "--user"] and {"--pipe", "--wait"} <= set(by_manager)
    assert run == ["podman", "exec", "ray-head", "python3", "-c", "print('a b')"]


def test_nccl_transport_reads_only_its_hosts_lines() -> None:
    lines = [f"spark-1:41:41 [0] {IB}", f"spark-10:9:9 [0] {SOCKET}", "spark-1 without a colon"]
    transport = nccl_transport(lines, "spark-1")
    assert transport.sockets == ()  # spark-10's line is not spark-1's
    assert transport.roce_ports == ("rocep1s0f0:1", "roceP2p1s0f0:1")
    assert transport.using.startswith("[0]rocep1s0f0:1/RoCE")


# NCCL's line on a real GB10, verbatim: a vLLM worker on an MSI EdgeXpert GB10
# (https://github.com/eugr/spark-vllm-docker/issues/411).
EDGEXPERT_USING = (
    "edgexpert-5ead:454:454 [0] NCCL INFO NET/IB : Using [0]rocep1s0f0:1/RoCE "
    "[1]roceP2p1s0f0:1/RoCE [RO]; OOB enp1s0f0np0"
)
# What vLLM's engine core and Ray put before a rank's line in the head's log, verbatim from a DGX
# Spark rack (https://github.com/mark-ramsey-ri/vllm-dgx-spark/issues/1).
RAY_RANK_PREFIXES = "(EngineCore_DP0 pid=2301) (RayWorkerWrapper pid=2981, ip=169.254.28.198) "


def test_nccl_transport_reads_a_real_gb10s_line_bare_and_behind_rays_prefixes() -> None:
    bare = nccl_transport([EDGEXPERT_USING], "edgexpert-5ead")
    assert bare.roce_ports == ("rocep1s0f0:1", "roceP2p1s0f0:1")
    # The same line as a Ray rank on host spark-3995 prints it (composed from the two captures).
    ranked = RAY_RANK_PREFIXES + EDGEXPERT_USING.replace(
        "edgexpert-5ead:454:454", "spark-3995:2981:2981"
    )
    assert nccl_transport([ranked], "spark-3995").roce_ports == bare.roce_ports
    assert nccl_transport([ranked], "spark-399").using == ""  # another host's line


def test_nccl_transport_keeps_the_last_using_line_and_every_socket_line() -> None:
    one = IB.replace(" [1]roceP2p1s0f0:1/RoCE", "")
    lines = [f"spark-2:5:5 [0] {IB}", f"spark-2:7:7 [0] {one}", f"spark-2:7:7 [0] {SOCKET}"]
    transport = nccl_transport(lines, "spark-2")
    assert transport.roce_ports == ("rocep1s0f0:1",)
    assert transport.sockets == (f"spark-2:7:7 [0] {SOCKET}",)
    assert nccl_transport([], "spark-2").using == ""


def test_nccl_transport_reads_only_the_running_engines_lines() -> None:
    """A restarted engine appends to the same log: the fallback before its restart is over."""
    start = "INFO 12-04 06:00:00 [api_server.py:1] vLLM API server version 0.26.1"
    before = [start, f"spark-2:7:7 [0] {SOCKET}"]
    after = [start, f"spark-2:9:9 [0] {IB}"]
    transport = nccl_transport([*before, *after], "spark-2")
    assert transport.sockets == ()
    assert transport.roce_ports == ("rocep1s0f0:1", "roceP2p1s0f0:1")
    assert nccl_transport([*after, *before], "spark-2").sockets == (f"spark-2:7:7 [0] {SOCKET}",)


# NCCL's warning when an HCA's queue pair finds no path to the peer's: the message verbatim from
# a public three-Spark triangle report (2026-08-21: one node's f0 had no cable to the peer NCCL
# paired it with), behind the `ibvwrap.cc:309 NCCL WARN Call to` and host prefix another public
# GB10 capture shows for the same call.
QP_TIMEOUT = (
    "sparkmain:77:90 [0] ibvwrap.cc:309 NCCL WARN Call to ibv_modify_qp failed with "
    "110 Connection timed out, on dev rocep1s0f0:1, curr state INIT, next state RTR, local GID "
    "index 7, local GID ::ffff:192.168.99.1, remote GID ::ffff:192.168.99.6"
)


def test_nccl_transport_names_each_queue_pair_that_found_no_path() -> None:
    transport = nccl_transport([QP_TIMEOUT, f"sparkmain:77:77 [0] {IB}"], "sparkmain")

    assert transport.unconnected == (
        QueuePairMiss("rocep1s0f0", "192.168.99.1", "192.168.99.6", "110 Connection timed out"),
    )
    assert nccl_transport([QP_TIMEOUT], "spark-sep").unconnected == ()


def test_a_log_file_joins_partial_records_and_drops_one_the_tail_cut() -> None:
    assert "'#absent'" in log_file("/x").command  # quoted: a bare # starts a shell comment
    assert parse_log_file("#absent\n") is None
    assert parse_log_file("") == ()
    cut = "34.1+00:00 stdout F a line whose record the tail cut\n"  # still a record: kept
    torn = "out F torn\n"  # not one: dropped
    records = "T stdout P first \nT stdout F half\nT stderr F second\nT stdout P unfinished"
    assert parse_log_file(torn + cut + records) == (
        "a line whose record the tail cut",
        "first half",
        "second",
        "unfinished",
    )


def test_container_env_and_rootless() -> None:
    record = {"Config": {"Env": ["NCCL_IB_HCA=a,b", "EMPTY=", "EQ=x=y"]}}
    assert container_env(record) == {"NCCL_IB_HCA": "a,b", "EMPTY": "", "EQ": "x=y"}
    assert parse_rootless("false\n") is False


def test_main_pid_of_a_unit() -> None:
    assert main_pid("user@1000.service").command == (
        "systemctl show -p MainPID -- user@1000.service"
    )
    assert main_pid("x.service", "user", "sparkrack").sudo
    assert parse_main_pid("MainPID=\n") == 0
    assert parse_main_pid("") == 0


@pytest.mark.parametrize(
    ("stdout", "seconds"),
    [("200 0.5", 0.5), ("404 0.01", 0.01), ("000 5.0", None), ("", None)],
)
def test_response_time_counts_any_http_answer(stdout: str, seconds: float | None) -> None:
    assert parse_response_time(stdout) == seconds


def test_collectors_are_read_from_sample_lines_only() -> None:
    page = (
        '# HELP node_scrape_collector_success{collector="help"} not a sample\n'
        'node_scrape_collector_success{collector="cpu"} 1\n'
        'node_scrape_collector_success{collector="pressure"} 0\n'
    )
    assert parse_collectors(page) == {"cpu", "pressure"}
    assert parse_collectors("\n") is None


def test_prometheus_api_encodes_each_parameter() -> None:
    fact = prometheus_api("http://h:9090/api/v1/series", 'match[]={job="x y"}', "limit=5")
    assert "-G --data-urlencode 'match[]={job=\"x y\"}' --data-urlencode limit=5" in fact.command
    assert parse_api_data('{"status":"success","data":[]}') == []
    assert parse_api_data("") is None


def test_a_config_written_after_the_start_is_stale_and_one_before_is_not() -> None:
    assert ConfigAge(started=100.5, newest_config=100.6).stale
    assert not ConfigAge(started=100.5, newest_config=100.4).stale
    assert not ConfigAge(started=None, newest_config=100.4).stale  # never started: nothing runs
    assert not ConfigAge(started=100.5, newest_config=None).stale  # no file: nothing to be behind
