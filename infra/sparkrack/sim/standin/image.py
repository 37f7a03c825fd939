"""The engine stand-in image: a Debian base from `sim.images`, then Ray from PyPI and `engine.py`.

The base is debootstrapped (no registry is reachable); `podman build` adds a venv with a pinned
Ray and the server module. The image tag is a digest of everything that shapes it (the
Containerfile, the server source and the base recipe), so an unchanged stand-in is found with
one `podman image exists` and a changed one is rebuilt. It is also tagged `latest`, the name the
simulated stacks declare.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from pathlib import Path

from sparkrack.config.cache import cache_root
from sparkrack.sim.images import (
    IMAGE_REPOSITORY,
    RootfsRecipe,
    build_lock,
    ensure_rootfs_image,
    podman_image_exists,
)
from sparkrack.sim.shell import Progress, SimError, run, timed_step

STANDIN_REPOSITORY = f"{IMAGE_REPOSITORY}/engine-standin"
LATEST = f"{STANDIN_REPOSITORY}:latest"
HERE = Path(__file__).resolve().parent
CONTAINERFILE = HERE / "Containerfile"
# The stand-in's sources: engine.py runs, the others beside it (standin/__init__.py says which).
SOURCE_NAMES = (
    "engine.py",
    "serve_args.py",
    "api.py",
    "metrics.py",
    "cuda.py",
    "nccl.py",
    "reach.py",
)
SOURCES = tuple(HERE / name for name in SOURCE_NAMES)

BASE_RECIPE = RootfsRecipe(
    suite="bookworm",
    variant="minbase",
    # iproute2 and procps: `ip` and `ps` for whoever debugs a running stand-in; Ray needs neither.
    packages=("python3", "python3-venv", "ca-certificates", "iproute2", "procps"),
)

# pip's and podman's lines worth showing while the build runs; the rest only on failure.
PROGRESS_PREFIXES = ("STEP ", "Downloading ray", "Installing collected", "Successfully ")
PROGRESS_WIDTH = 120
BUILD_TIMEOUT_S = 1800.0
# Where the host's pip (and requests) are told to find their CA bundle, in pip's order.
CA_BUNDLE_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")
DEBIAN_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# podman asks for more open files and processes than this machine's hard limits allow; and runc
# here refused nproc 50000 under a hard limit of 96363 but took 32768 (measured, cause unknown).
ULIMIT_CEILING = 32768


def ensure_standin_image(progress: Progress) -> str:
    """The stand-in image reference (`localhost/sparkrack/engine-standin:<key12>`), also tagged
    `latest`; built only when Podman lacks it."""
    reference = f"{STANDIN_REPOSITORY}:{build_key()[:12]}"
    if not podman_image_exists(reference):
        with build_lock(cache_root() / "images" / f"engine-standin-{build_key()[:12]}"):
            if not podman_image_exists(reference):
                build_image(reference, progress)
                remove_superseded(reference)
    run(["podman", "tag", reference, LATEST], what="tag of the engine stand-in")
    return reference


def remove_superseded(reference: str) -> None:
    """Drop stand-ins built from older sources, so that editing engine.py does not pile up
    images. One still used by a container stays (podman refuses), which is what we want."""
    listing = ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", STANDIN_REPOSITORY]
    names = run(listing, what="list of engine stand-in images").stdout.split()
    for name in set(names) - {reference, LATEST}:
        run(["podman", "rmi", name], what=f"removal of {name}", check=False)


def build_key() -> str:
    """What the image is made of: a change to any of it names a new image."""
    digest = hashlib.sha256()
    parts = (CONTAINERFILE, *SOURCES)
    for part in (*(path.read_bytes() for path in parts), BASE_RECIPE.digest().encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_image(reference: str, progress: Progress) -> None:
    (cache_root() / "images").mkdir(parents=True, exist_ok=True)
    base = ensure_rootfs_image("engine-standin-base", BASE_RECIPE, progress)
    with tempfile.TemporaryDirectory(prefix="standin-build-") as context:
        # Only the files the Containerfile uses: the build context is sent whole.
        for path in (CONTAINERFILE, *SOURCES):
            shutil.copy(path, Path(context) / path.name)
        with timed_step(progress, f"image engine-standin: podman build {reference}"):
            stream_build(podman_build_args(base, reference, context), progress)


def podman_build_args(base: str, reference: str, context: str) -> list[str]:
    return [
        "podman", "build", "--runtime", "runc", "--pull=never",
        # pip is the one step that reaches the network; host networking avoids netavark setup.
        "--network", "host",
        *podman_ulimit_args(),
        "--secret", f"id=host-ca,src={host_ca_bundle()}",
        "--build-arg", f"BASE={base}",
        "--tag", reference,
        "--file", str(Path(context) / "Containerfile"),
        context,
    ]  # fmt: skip


def host_ca_bundle() -> str:
    """The CA bundle the host's own pip trusts, for pip inside the build."""
    for candidate in (*(os.environ.get(name) for name in CA_BUNDLE_ENV), DEBIAN_CA_BUNDLE):
        if candidate and Path(candidate).is_file():
            return candidate
    raise SimError(
        f"image engine-standin: no CA bundle for pip: set one of {', '.join(CA_BUNDLE_ENV)}"
    )


def podman_ulimit_args() -> list[str]:
    """`--ulimit` for open files and processes at this machine's hard limits (capped)."""
    args = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(limit)[1]
        value = ULIMIT_CEILING if hard == resource.RLIM_INFINITY else min(hard, ULIMIT_CEILING)
        args += ["--ulimit", f"{name}={value}:{value}"]
    return args


def stream_build(args: list[str], progress: Progress) -> None:
    """Run the build, passing its milestones to `progress` as they happen (pip's download of Ray
    is the long part) and the output's tail into the error when it fails."""
    build = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(BUILD_TIMEOUT_S, build.kill)
    watchdog.start()
    recent: deque[str] = deque(maxlen=20)
    try:
        assert build.stdout is not None  # for mypy: stdout=PIPE above
        for line in build.stdout:
            recent.append(line.rstrip())
            if line.lstrip().startswith(PROGRESS_PREFIXES):
                progress(f"image engine-standin: {line.strip()[:PROGRESS_WIDTH]}")
        status = build.wait()
    finally:
        watchdog.cancel()
    if status != 0:
        tail = "\n".join(recent)
        raise SimError(f"image engine-standin: `podman build` exited {status}:\n{tail}")
