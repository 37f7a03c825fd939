"""The stack's secrets: a secret key set in clear is refused, and the secrets are read as the
program (Pulumi's config, kept encrypted in state) or a client here (`sparkrack bench`) reads them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparkrack.stackspec.errors import Problem, SpecError
from sparkrack.stackspec.secrets import (
    API_KEY_KEY,
    GRAFANA_PASSWORD_KEY,
    HF_TOKEN_KEY,
    SECRET_KEYS,
    set_secret,
)

API_KEY_ENV = "SPARKRACK_API_KEY"  # a client's key, before the stack's secret


def refuse_plain_secrets(stack: str) -> None:
    """The program's side of `refuse_plain`: the config as Pulumi hands it over."""
    import pulumi  # only the program needs it
    from pulumi.runtime.config import is_config_secret

    config = pulumi.Config("sparkrack")
    refuse_plain(
        stack,
        lambda key: not is_config_secret(f"sparkrack:{key}") and config.get(key) is not None,
    )


def refuse_plain(stack: str, plain: Callable[[str], bool]) -> None:
    """A secret key set as plain config is refused, with the command that sets it right: it is
    in clear in the stack file already, and would reach the state in clear too. `plain` says
    whether a key (of SECRET_KEYS) is set in clear; its value is never read into a message."""
    problems = [
        Problem(
            f"sparkrack:{key}",
            f"set as plain text: remove it from the stack file and run {set_secret(key, stack)}",
        )
        for key in SECRET_KEYS
        if plain(key)
    ]
    if problems:
        raise SpecError(stack, problems)


def plain_in_file(config: Mapping[str, Any]) -> Callable[[str], bool]:
    """The stack file's side of `refuse_plain`: Pulumi writes a secret as `{secure: ...}`."""

    def plain(key: str) -> bool:
        value = config.get(f"sparkrack:{key}")
        return value is not None and not (isinstance(value, Mapping) and "secure" in value)

    return plain


def hf_token() -> Any:
    """The stack's Hugging Face token as a secret Output, or None: read from the running
    program's config (never from a file), so it stays encrypted in state."""
    import pulumi  # only the program needs it; the CLI loads specs without the Pulumi runtime

    return pulumi.Config("sparkrack").get_secret(HF_TOKEN_KEY)


def api_key() -> Any:
    """The key the OpenAI API asks for, as a secret Output, or None (then it asks for none)."""
    import pulumi  # only the program needs it

    return pulumi.Config("sparkrack").get_secret(API_KEY_KEY)


def api_key_of(stack: str, project_dir: Path) -> str | None:
    """The stack's API key for a client here (`sparkrack bench`): $SPARKRACK_API_KEY, else the
    stack's secret decrypted by the Pulumi CLI (its passphrase from the environment, as for
    `up`); None when the stack sets none."""
    if from_env := os.environ.get(API_KEY_ENV):
        return from_env
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        problem = Problem(
            f"sparkrack:{API_KEY_KEY}", f"no pulumi CLI to read it: set {API_KEY_ENV}"
        )
        raise SpecError(stack, [problem])
    argv = [pulumi, "config", "get", f"sparkrack:{API_KEY_KEY}", "--stack", stack]
    done = subprocess.run(argv, cwd=project_dir, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        detail = done.stderr.strip()[-200:]
        raise SpecError(stack, [Problem(f"sparkrack:{API_KEY_KEY}", f"cannot be read: {detail}")])
    return done.stdout.rstrip("\n") or None


def grafana_admin_password() -> Any:
    """Grafana's admin password as a secret Output, or None (then Grafana is not started)."""
    import pulumi  # only the program needs it

    return pulumi.Config("sparkrack").get_secret(GRAFANA_PASSWORD_KEY)
