"""The one writer of values into systemd units and Quadlet `.container` files.

Validation of the stack keeps hostile text out; this is the second wall. A unit file is read line
by line, so a value with a line break would start a setting of its own (an `ExecStartPre=` run by
the service user): such a value is refused here, whoever built it. systemd expands `%` specifiers
in every setting, quoted or not, and `$VAR` in command lines; a double-quoted word takes C-style
backslash escapes (systemd.syntax(7), systemd.service(5) "Command lines").
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkrack.text.spectext import describe

# Characters that end or open a word on a command line or in a quoted setting.
NEEDS_QUOTES = frozenset(" \t\"'\\;")


class UnsafeUnitValue(ValueError):
    """A value that cannot be written into a unit file as one value."""


def _one_line(value: str) -> str:
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        raise UnsafeUnitValue(f"systemd unit: {value!r} holds {describe(bad)}: one line only")
    return value


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plain(value: str) -> str:
    """A setting taken as it stands (Image=, ContainerName=, Description=): specifiers escaped;
    a value that would need quotes is refused, since these settings do not unquote."""
    _one_line(value)
    bad = next((c for c in value if c in NEEDS_QUOTES), None)
    if bad is not None:
        raise UnsafeUnitValue(f"systemd unit: {value!r} holds {describe(bad)}: plain text only")
    return value.replace("%", "%%")


def quoted(value: str) -> str:
    """One quoted value of a setting that unquotes (Environment="NAME=value")."""
    return _quoted(_one_line(value).replace("%", "%%"))


# The Plan mounts the service user's Podman socket from its runtime dir, which only systemd knows
# (%t): that one leading specifier is kept. A stack's paths are absolute (spec.NodePath), so no
# stack value can start a volume this way.
KEPT_SPECIFIER = "--volume=%t/"


def word(value: str) -> str:
    """One word of a command line (ExecStart=, Quadlet's Exec= and PodmanArgs=): `$` kept from
    variable expansion, specifiers escaped, quoted when it must be."""
    kept = KEPT_SPECIFIER if value.startswith(KEPT_SPECIFIER) else ""
    escaped = kept + _one_line(value[len(kept) :]).replace("%", "%%").replace("$", "$$")
    needs_quotes = not escaped or any(c in NEEDS_QUOTES for c in escaped)
    return _quoted(escaped) if needs_quotes else escaped


def command_line(words: Iterable[str]) -> str:
    return " ".join(word(w) for w in words)
