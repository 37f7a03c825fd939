"""Secrets are Pulumi secrets, never stack values: the names sparkrack reads them under, and the
one rule for telling a credential in the stack by its name (an env name, an engine flag) or by
its shape (a token's prefix). A plain stack value sits in clear in the stack file, the state,
the engine's unit file and `sparkrack plan`'s output."""

from __future__ import annotations

import re
import shlex

# The Pulumi config keys (namespace sparkrack) that hold secrets, and what each is for.
HF_TOKEN_KEY = "hfToken"
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"
API_KEY_KEY = "apiKey"
SECRET_KEYS = {
    HF_TOKEN_KEY: "a Hugging Face token",
    GRAFANA_PASSWORD_KEY: "Grafana's admin password",
    API_KEY_KEY: "the key the OpenAI API asks of its clients",
}


def set_secret(key: str, stack: str) -> str:
    """The command that stores a secret as Pulumi does: encrypted, in the stack file."""
    return f"`pulumi config set --secret sparkrack:{key} <value> --stack {shlex.quote(stack)}`"


# A name whose last word is one of these says its value is a credential: HF_TOKEN, OPENAI_API_KEY,
# --api-key, --hf-token. Only the last word: --max-num-batched-tokens and
# --return-tokens-as-token-ids count tokens, they do not hold one.
CREDENTIAL_WORDS = ("TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "KEY", "APIKEY")


def names_a_credential(name: str) -> bool:
    """An env name or an engine flag (`--api-key`, `--hf-token=...`) that holds a credential."""
    words = re.split(r"[_\-]+", name.split("=", 1)[0].strip("-_").upper())
    last = words[-1]
    return last in CREDENTIAL_WORDS or last.endswith(("TOKEN", "PASSWORD", "SECRET", "APIKEY"))


_START = r"(?<![A-Za-z0-9])"
# What a credential looks like, whatever field it is put in: the prefixes the issuers give them.
SHAPES = (
    ("a Hugging Face token (hf_...)", re.compile(_START + r"hf_[A-Za-z0-9]{30,}")),
    ("an API key (sk-...)", re.compile(_START + r"sk-[A-Za-z0-9_-]{20,}")),
    ("a GitHub token", re.compile(_START + r"(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,})")),
    ("a GitLab token (glpat-...)", re.compile(_START + r"glpat-[A-Za-z0-9_-]{20,}")),
    ("a Slack token (xox...)", re.compile(_START + r"xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("an AWS access key id", re.compile(_START + r"(AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY")),
    ("a JSON Web Token", re.compile(_START + r"eyJ[\w-]{10,}\.eyJ[\w-]{10,}\.")),
    ("a bearer token", re.compile(r"(?i)\bbearer\s+[\w.~+/-]{16,}")),
    ("a password in a URL", re.compile(r"://[^/\s:@]+:[^/\s@]+@")),
)


def secret_shape(text: str) -> str | None:
    """What kind of credential `text` holds, by its shape; None when it looks like none."""
    return next((what for what, shape in SHAPES if shape.search(text)), None)


def keep_out(what: str, stack: str) -> str:
    """The refusal for a credential found in the stack: never the value itself, and where the
    secret goes instead."""
    if what.startswith("a Hugging Face token"):
        where = f"it is the Pulumi secret {set_secret(HF_TOKEN_KEY, stack)}"
    else:
        known = ", ".join(f"sparkrack:{key} ({why})" for key, why in SECRET_KEYS.items())
        where = f"sparkrack takes secrets only as Pulumi secrets: {known}"
    return (
        f"holds {what}: a stack value sits in clear in the stack file, the state and the plan's"
        f" output; remove it ({where})"
    )
