"""Text from a stack that reaches a shell, a path, a unit file or a generated config: each kind
checked against its own grammar, and refused in words (which character, and why).

Validation keeps hostile text out before any node is touched; the writers (`openssh`,
`resources.podman`'s unit quoting) are the second wall. A non-ASCII look-alike (a Cyrillic a,
U+0430, in a node name) is named with its Unicode name: on screen it reads as the plain letter.
"""

from __future__ import annotations

import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

ASCII_NAME = string.ascii_letters + string.digits
SPOKEN = {" ": "a space", "\n": "a line break", "\r": "a carriage return", "\t": "a tab"}


def describe(char: str) -> str:
    """A character as a person reads it in a message."""
    if char in SPOKEN:
        return SPOKEN[char]
    if not char.isprintable():
        return f"the control character U+{ord(char):04X}"
    if not char.isascii():
        return f"{char!r} (U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}), not ASCII"
    return repr(char)


@dataclass(frozen=True)
class TextKind:
    """One grammar: the characters it allows, its shape, its length, and a rule in words."""

    what: str  # "a node name"
    rule: str  # what the text may be, said to the user
    alphabet: str
    shape: re.Pattern[str]
    max_length: int = 255

    def __call__(self, value: str) -> str:
        bad = next((c for c in value if c not in self.alphabet), None)
        if bad is not None:
            raise ValueError(f"{value!r} holds {describe(bad)}: {self.what} is {self.rule}")
        if not value or len(value) > self.max_length:
            raise ValueError(
                f"{value!r} is not {self.what}: 1 to {self.max_length} characters, {self.rule}"
            )
        if not self.shape.fullmatch(value):
            raise ValueError(f"{value!r} is not {self.what}: {self.rule}")
        return value


NODE_NAME = TextKind(
    "a node name",
    "lower-case ASCII letters, digits and '-', starting and ending with a letter or digit",
    string.ascii_lowercase + string.digits + "-",
    re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"),
    max_length=63,
)
# Linux refuses an interface name of 16 bytes or more (IFNAMSIZ), '/', ':' and white space.
NETDEV = TextKind(
    "a Linux interface name",
    "up to 15 ASCII letters, digits, '_', '.' or '-'",
    ASCII_NAME + "_.-",
    re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"),
    max_length=15,
)
RDMA_DEVICE = TextKind(
    "an RDMA device name", "ASCII letters, digits and '_'", ASCII_NAME + "_", re.compile(r"\w+"), 63
)
SHORT_NAME = TextKind(
    "a name",
    "ASCII letters, digits, '_', '.' or '-', starting with a letter or digit",
    ASCII_NAME + "_.-",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*"),
    max_length=63,
)
# The OCI distribution reference: [registry[:port]/]path[:tag][@digest], the path in lower case.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*(?::[0-9]+)?/)"
IMAGE_REFERENCE = TextKind(
    "an image reference",
    "[registry[:port]/]name[:tag][@sha256:digest], the name in lower case",
    ASCII_NAME + "._-/:@",
    re.compile(
        rf"{_REGISTRY}?{_COMPONENT}(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?"
    ),
)
HF_REPO = TextKind(
    "a Hugging Face repository",
    "owner/name of ASCII letters, digits, '_', '.' or '-'",
    ASCII_NAME + "_.-/",
    re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?"),
    max_length=192,
)
GIT_REVISION = TextKind(
    "a revision",
    "a branch, tag or commit of ASCII letters, digits, '_', '.', '-' or '/', without '..'",
    ASCII_NAME + "_.-/",
    re.compile(r"(?!.*\.\.)[A-Za-z0-9][\w./-]*"),
)
PACKAGE_VERSION = TextKind(
    "a release version",
    "numbers separated by dots, e.g. 0.26.1 or 2.54.1, optionally a pre-release such as rc1",
    string.digits + ".abcdefghijklmnopqrstuvwxyz",
    re.compile(r"[0-9]+(\.[0-9]+){1,3}((a|b|rc|post|dev)[0-9]+)?"),
    max_length=32,
)
COMMIT_HASH = TextKind(
    "a commit hash",
    "the 40 hexadecimal digits of a git commit, in lower case (a branch or tag can move)",
    "0123456789abcdef",
    re.compile(r"[0-9a-f]{40}"),
    max_length=40,
)
HTTP_URL = TextKind(
    "an http(s) URL",
    "http:// or https://, a host name, an optional port and path",
    ASCII_NAME + "_.-/:~",
    re.compile(r"https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[\w.~/-]*)?"),
)
SERVED_NAME = TextKind(
    "a served model name",
    "ASCII letters, digits, '_', '.', '-', '/' or ':'",
    ASCII_NAME + "_.-/:",
    re.compile(r"[A-Za-z0-9][\w./:-]*"),
    max_length=128,
)
# A user name reaches an OpenSSH config and shell lines: anything but a plain POSIX name (a line
# break, a space, quotes) could smuggle in a directive such as ProxyCommand.
POSIX_USER = TextKind(
    "a POSIX user name",
    "a lower-case letter or '_', then up to 31 lower-case letters, digits, '_' or '-'",
    string.ascii_lowercase + string.digits + "_-",
    re.compile(r"[a-z_][a-z0-9_-]*"),
    max_length=32,
)
ENV_NAME = TextKind(
    "an environment variable name",
    "ASCII letters, digits and '_', not starting with a digit",
    ASCII_NAME + "_",
    re.compile(r"[A-Za-z_]\w*"),
)


# A Debian package name (Debian Policy 5.6.7): it reaches an apt command line.
DEBIAN_PACKAGE = TextKind(
    "a Debian package name",
    "lower-case letters, digits, '+', '-' or '.', starting with a letter or digit",
    string.ascii_lowercase + string.digits + "+-.",
    re.compile(r"[a-z0-9][a-z0-9+.-]+"),
)


def _one_line(value: str) -> str:
    # Free text (an env value, an engine argument, a label) may be any printable Unicode, but one
    # line: a line break would start a directive of its own in a unit or config file.
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"{value!r} holds {describe(bad)}: this value is one line of text")
    return value


def _plain_path(value: str, roots: tuple[str, ...], forbidden: str, one_line: str) -> str:
    """`value` as a path that starts at one of `roots`, is one line of printable characters
    without any of `forbidden`, and has no `..`; `one_line` says what such a path is."""
    bad = next((c for c in value if not c.isprintable() or c in forbidden), None)
    if bad is not None:
        raise ValueError(f"{value!r} holds {describe(bad)}: {one_line}")
    if not value.startswith(roots):
        where = "an absolute path" + (" or one under ~/" if "~/" in roots else "")
        raise ValueError(f"{value!r} is not {where}")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} climbs out with '..': give the path itself")
    return value


def _local_path(value: str) -> str:
    # A file on the machine running sparkrack: it reaches an OpenSSH config and the SSH client.
    # OpenSSH expands ${NAME} in its path keywords, with no escape for a literal one: no '$'.
    return _plain_path(value, ("/", "~/"), '"$', "a path here is one line, without '\"' or '$'")


def _node_path(value: str) -> str:
    # A directory on a node: it reaches shell lines, units and mounts (`--volume SRC:DST`).
    return _plain_path(value, ("/",), ":", "a path on a node is one line of text without ':'")


def _home_path(value: str) -> str:
    # A place under the service user's home, given relative to it: the same rules as a node path
    # (it reaches shell lines, units and mounts), without the leading '/'.
    if not value or value.startswith(("/", "~")):
        raise ValueError(f"{value!r} is not a path relative to the home, such as .cache/name")
    return _node_path("/" + value).removeprefix("/")


NodeName = Annotated[str, AfterValidator(NODE_NAME)]
PosixUser = Annotated[str, AfterValidator(POSIX_USER)]
LocalPath = Annotated[str, AfterValidator(_local_path)]
NodePath = Annotated[str, AfterValidator(_node_path)]
HomePath = Annotated[str, AfterValidator(_home_path)]
DebianPackage = Annotated[str, AfterValidator(DEBIAN_PACKAGE)]
Netdev = Annotated[str, AfterValidator(NETDEV)]
RdmaDevice = Annotated[str, AfterValidator(RDMA_DEVICE)]
ShortName = Annotated[str, AfterValidator(SHORT_NAME)]
ImageReference = Annotated[str, AfterValidator(IMAGE_REFERENCE)]
HfRepo = Annotated[str, AfterValidator(HF_REPO)]
GitRevision = Annotated[str, AfterValidator(GIT_REVISION)]
CommitHash = Annotated[str, AfterValidator(COMMIT_HASH)]
PackageVersion = Annotated[str, AfterValidator(PACKAGE_VERSION)]
HttpUrl = Annotated[str, AfterValidator(HTTP_URL)]
ServedName = Annotated[str, AfterValidator(SERVED_NAME)]
EnvName = Annotated[str, AfterValidator(ENV_NAME)]
OneLine = Annotated[str, AfterValidator(_one_line)]
