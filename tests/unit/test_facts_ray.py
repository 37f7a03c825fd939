"""The Ray node query: the alive nodes' addresses from the GCS, never `ray status`'s summary."""

from __future__ import annotations

import pytest

from sparkrack.facts.ray import alive_nodes_command, parse_alive_nodes

pytestmark = pytest.mark.unit


def test_the_query_reads_the_gcs_node_table() -> None:
    argv = alive_nodes_command()
    assert argv[:2] == ("python3", "-c")
    assert "ray.nodes()" in argv[2] and "n['Alive']" in argv[2]


def test_the_last_line_holds_the_addresses() -> None:
    stdout = 'FutureWarning: Tip: ...\n  warnings.warn(\n["198.18.3.11", "198.18.3.12"]\n'
    assert parse_alive_nodes(stdout) == ("198.18.3.11", "198.18.3.12")


def test_rays_log_lines_after_the_addresses_are_passed_over() -> None:
    # In the shape of Ray's C++ log lines (the line CI met was not kept: only the parse error).
    ray_log = "[2026-12-04 17:30:01,123 W 512 512] gcs_client.cc:187: Failed to get cluster ID"
    stdout = f'["198.18.16.11", "198.18.16.12"]\n{ray_log}\n'
    assert parse_alive_nodes(stdout) == ("198.18.16.11", "198.18.16.12")


@pytest.mark.parametrize("stdout", ["", "Traceback (most recent call last):", '{"a": 1}'])
def test_anything_else_is_an_error(stdout: str) -> None:
    with pytest.raises(ValueError):
        parse_alive_nodes(stdout)
