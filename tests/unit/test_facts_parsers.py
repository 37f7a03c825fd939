"""What the facts' golden cases (test_fact_goldens.py) cannot hold: normalisations over many
spellings, a value's properties, and the errors a builder gives before any command runs."""

from __future__ import annotations

import pytest

from sparkrack.facts.files import normalize_mode
from sparkrack.facts.units import UnitState, systemctl, unit_state
from sparkrack.facts.users import subids

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("given", ["644", "0644", "0o644"])
def test_modes_normalize_to_four_digits(given: str) -> None:
    assert normalize_mode(given) == "0644"


@pytest.mark.parametrize(
    ("file_state", "active_state", "enabled", "active"),
    [
        ("enabled", "active", True, True),
        ("enabled-runtime", "activating", True, False),
        ("static", "active", False, True),  # a socket's: started by another unit, never enabled
        ("disabled", "inactive", False, False),
        ("", "inactive", False, False),  # not-found
    ],
)
def test_a_unit_is_enabled_and_active_by_its_states(
    file_state: str, active_state: str, enabled: bool, active: bool
) -> None:
    unit = UnitState(load="loaded", active_state=active_state, sub="", file_state=file_state)
    assert (unit.enabled, unit.active) == (enabled, active)


def test_a_user_unit_is_read_as_root_and_needs_its_user() -> None:
    assert unit_state("podman.socket", "user", "sparkrack").sudo
    # An account the node lacks says so in the words the transport tells apart (NoSuchUser).
    asked = unit_state("podman.socket", "user", "sparkrack").command
    assert asked.startswith("id -u -- sparkrack >/dev/null 2>&1 || { echo 'sparkrack: unknown user")
    with pytest.raises(ValueError, match="needs its user"):
        systemctl("user", None, "show")


def test_subordinate_ids_are_read_only_from_their_two_files() -> None:
    with pytest.raises(ValueError, match="no such file /etc/passwd"):
        subids("passwd")
