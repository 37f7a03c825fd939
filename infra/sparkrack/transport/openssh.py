"""The one writer of OpenSSH client config: every value through `openssh_value`.

Validation of the stack keeps hostile text out; this is the second wall. OpenSSH reads a config
line by line and splits arguments on spaces, honouring double quotes, so a value with a newline
would start a directive of its own (`ProxyCommand` runs a command on the operator's machine): such
a value is refused here, whoever built it. A literal `%` in a keyword that expands %-tokens is
written `%%`, and a backslash inside quotes is doubled; `${` in such a keyword, which OpenSSH
expands from the environment and cannot escape, is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

# Keywords whose argument OpenSSH expands %-tokens in (ssh_config(5), TOKENS).
TOKEN_KEYWORDS = frozenset({"ControlPath", "HostName", "IdentityFile", "UserKnownHostsFile"})
NEEDS_QUOTES = frozenset(" \t#'\\=,")


class UnsafeValue(ValueError):
    """A value that cannot be written into an OpenSSH config as one argument."""


class Tokens(str):
    """A value whose %-tokens are meant for OpenSSH (a ControlPath ending in %C): not escaped,
    and so allowed only plain characters."""


def openssh_value(keyword: str, value: str) -> str:
    """`value` as one argument of `keyword`: quoted when it must be, %-escaped where expanded."""
    bad = next((c for c in value if not c.isprintable() or c == '"'), None)
    if bad is not None or not value:
        raise UnsafeValue(f"OpenSSH {keyword}: {value!r} cannot be one argument ({bad!r})")
    if isinstance(value, Tokens):
        if any(c in NEEDS_QUOTES for c in value):
            raise UnsafeValue(f"OpenSSH {keyword}: {value!r} must be plain: it keeps its tokens")
        return str(value)
    if keyword in TOKEN_KEYWORDS:
        if "${" in value:  # expanded from the environment, and OpenSSH has no escape for it
            raise UnsafeValue(f"OpenSSH {keyword}: {value!r} holds '${{': it would be expanded")
        value = value.replace("%", "%%")
    if not any(c in NEEDS_QUOTES for c in value):
        return value
    # Inside quotes OpenSSH reads a backslash as an escape (a trailing one would eat the quote).
    return '"' + value.replace("\\", "\\\\") + '"'


def host_block(patterns: Iterable[str], options: Iterable[tuple[str, object]]) -> str:
    """One `Host` block: its patterns, then each option on its own line, and a blank line."""
    head = "Host " + " ".join(openssh_value("Host", pattern) for pattern in patterns)
    lines = [
        f"  {keyword} {openssh_value(keyword, value if isinstance(value, str) else str(value))}"
        for keyword, value in options
    ]
    return "\n".join([head, *lines]) + "\n\n"
