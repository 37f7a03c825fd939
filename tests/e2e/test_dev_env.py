"""`eval "$(scripts/dev env STACK)"`: a shell that runs plain `pulumi` with sparkrack's settings,
given a sim stack's documented passphrase and never the user's own."""

from __future__ import annotations

import os
import subprocess

from tests.e2e.conftest import REPO, SIM_PASSPHRASE

USERS_PASSPHRASE = "a-passphrase-of-the-users-own"


def shell_after_dev_env(stack: str, command: str) -> subprocess.CompletedProcess[str]:
    """`command` in a bash that evaluated `scripts/dev env STACK` first, without the test's own
    engine settings (PATH aside, which the set-up needs to find the tools)."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PULUMI_")}
    script = f'eval "$(scripts/dev env {stack})" && {command}'
    return subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def test_a_sim_stacks_shell_runs_plain_pulumi_offline_with_its_passphrase() -> None:
    done = shell_after_dev_env(
        "sim-2",
        'pulumi version && printf "%s\\n" "$PULUMI_CONFIG_PASSPHRASE" "$PULUMI_BACKEND_URL"'
        ' "$PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"',
    )
    version, passphrase, backend, no_downloads = done.stdout.splitlines()
    assert version.startswith("v3.")
    assert passphrase == SIM_PASSPHRASE
    assert backend == f"file://{REPO}/.state"
    assert no_downloads == "true"


def test_the_users_own_passphrase_is_never_printed() -> None:
    printed = subprocess.run(
        ["bash", "-c", "scripts/dev env sim-2"],
        cwd=REPO,
        env={**os.environ, "PULUMI_CONFIG_PASSPHRASE": USERS_PASSPHRASE},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert "export PULUMI_BACKEND_URL=" in printed.stdout
    assert USERS_PASSPHRASE not in printed.stdout + printed.stderr
    assert "PULUMI_CONFIG_PASSPHRASE" not in printed.stdout
