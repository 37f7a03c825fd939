"""Root filesystem images built offline with debootstrap and imported into rootful Podman.

No container registry is reachable, so every image the simulator needs is built from Debian
packages: debootstrap, then apt inside the chroot (it resolves virtual dependencies such as
Podman's `container-network-stack`, which debootstrap does not), then the recipe's files, then its
commands. The result is tarred, the tar is cached, and the tar is `podman import`ed.

An image is named by a digest of its recipe and of this builder's version, so a changed recipe
builds a new image and an unchanged one is found in Podman (seconds) or reimported from the cached
tar after a Podman reset (seconds too). Nothing half-built is ever used: the rootfs is built in a
temporary directory and the tar is renamed into place only when complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from sparkrack.config.cache import cache_root
from sparkrack.sim.shell import Progress, SimError, run, timed_step

# Bump when the way an image is built changes, so existing images are rebuilt.
BUILDER_VERSION = "2"
MIRROR = "http://deb.debian.org/debian"
IMAGE_REPOSITORY = "localhost/sparkrack"

CHROOT_ENV = {
    "DEBIAN_FRONTEND": "noninteractive",
    "LANG": "C.UTF-8",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}
# apt's package caches (78 MB, rebuilt by any apt-get update), the .debs debootstrap leaves behind,
# docs, man pages and translations: nothing in an image reads them, and the stand-in and exporter
# images are shipped to every simulated node (the stand-in's base was 304 MB, a third of it these).
SLIMMED = (
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/locale/*",
)
# Stops maintainer scripts from starting daemons inside the build chroot.
POLICY_RC_D = "#!/bin/sh\nexit 101\n"


@dataclass(frozen=True)
class RootfsRecipe:
    """What goes into an image. Build order: debootstrap `suite` (with `variant`, e.g. minbase),
    `apt-get install packages`, write `files` (path, content, mode), run `chroot_commands` (so
    they can use the files, e.g. `systemctl enable` a unit shipped as a file), clean apt.
    `changes` are `podman import --change` instructions such as `CMD ["/sbin/init"]`."""

    suite: str
    variant: str = ""
    packages: tuple[str, ...] = ()
    chroot_commands: tuple[str, ...] = ()
    files: tuple[tuple[str, str, int], ...] = ()
    changes: tuple[str, ...] = ()

    def canonical(self) -> str:
        return json.dumps({"builder": BUILDER_VERSION, **asdict(self)}, sort_keys=True)

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


def image_reference(name: str, recipe: RootfsRecipe) -> str:
    return f"{IMAGE_REPOSITORY}/{name}:{recipe.digest()[:12]}"


def cached_tar_path(name: str, recipe: RootfsRecipe) -> Path:
    return cache_root() / "images" / f"{name}-{recipe.digest()[:12]}.tar"


def ensure_rootfs_image(name: str, recipe: RootfsRecipe, progress: Progress) -> str:
    """The image reference for `recipe`, building or reimporting it only when Podman lacks it."""
    reference = image_reference(name, recipe)
    if podman_image_exists(reference):
        return reference
    tar_path = cached_tar_path(name, recipe)
    with build_lock(tar_path):
        if podman_image_exists(reference):  # another process finished it while we waited
            return reference
        if not tar_path.exists():
            build_rootfs_tar(name, recipe, tar_path, progress)
        with timed_step(progress, f"image {name}: podman import {reference}"):
            import_tar(tar_path, reference, recipe.changes)
    return reference


def podman_image_exists(reference: str) -> bool:
    return run(["podman", "image", "exists", reference], what="podman", check=False).returncode == 0


@contextmanager
def build_lock(tar_path: Path) -> Iterator[None]:
    # Two sessions bringing up clusters at once must not both debootstrap the same image. The
    # lock sits beside the tar, in a folder a fresh cache root does not have yet.
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with flocked(tar_path.with_suffix(".lock")):
        yield


@contextmanager
def flocked(lock_path: Path) -> Iterator[None]:
    """Held by this process alone until the block ends (the lock goes with a killed process)."""
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def import_tar(tar_path: Path, reference: str, changes: tuple[str, ...]) -> None:
    args = ["podman", "import"]
    for change in changes:
        args += ["--change", change]
    run([*args, str(tar_path), reference], what=f"import of {reference}")


def build_rootfs_tar(name: str, recipe: RootfsRecipe, tar_path: Path, progress: Progress) -> None:
    build_root = cache_root() / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    workdir = build_root / f"{tar_path.stem}.{os.getpid()}"
    remove_tree(workdir)
    rootfs = workdir / "rootfs"
    try:
        rootfs.mkdir(parents=True)
        with timed_step(progress, f"image {name}: debootstrap {recipe.suite}"):
            debootstrap(name, recipe, rootfs)
        customise(name, recipe, rootfs, progress)
        with timed_step(progress, f"image {name}: tar"):
            write_tar_atomically(name, rootfs, tar_path)
    finally:
        remove_tree(workdir)


def debootstrap(name: str, recipe: RootfsRecipe, rootfs: Path) -> None:
    args = ["debootstrap", f"--cache-dir={deb_cache(recipe.suite)}"]
    if recipe.variant:
        args.append(f"--variant={recipe.variant}")
    with deb_cache_lock(recipe.suite):
        run([*args, recipe.suite, str(rootfs), MIRROR], what=f"image {name}: debootstrap")


def deb_cache(suite: str) -> Path:
    """Downloaded .debs, shared by debootstrap and apt so a changed recipe rebuilds offline-fast."""
    path = cache_root() / "debs" / suite
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def deb_cache_lock(suite: str) -> Iterator[None]:
    """The suite's .deb cache to one writer: debootstrap and apt each download into it, and two
    images of one suite built at once (two racks' first start) otherwise read each other's
    half-written .debs."""
    with flocked(deb_cache(suite) / ".sparkrack-lock"):
        yield


def customise(name: str, recipe: RootfsRecipe, rootfs: Path, progress: Progress) -> None:
    policy = rootfs / "usr/sbin/policy-rc.d"
    write_file(rootfs, "/usr/sbin/policy-rc.d", POLICY_RC_D, 0o755)
    with chroot_mounts(rootfs, deb_cache(recipe.suite)):
        if recipe.packages:
            with timed_step(progress, f"image {name}: apt-get install {len(recipe.packages)}"):
                install_packages(name, recipe, rootfs)
        for path, content, mode in recipe.files:
            write_file(rootfs, path, content, mode)
        for command in recipe.chroot_commands:
            with timed_step(progress, f"image {name}: {command[:60]}"):
                chroot(rootfs, command, what=f"image {name}: `{command}`")
    policy.unlink()
    remove_tree(rootfs / "var/lib/apt/lists")
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
    slim(rootfs)


def slim(rootfs: Path) -> None:
    """Drop what no image reads (SLIMMED), once the .deb cache is no longer mounted in it."""
    for pattern in SLIMMED:
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                remove_tree(path)
            else:
                path.unlink()


def install_packages(name: str, recipe: RootfsRecipe, rootfs: Path) -> None:
    with deb_cache_lock(recipe.suite):  # and apt refuses a cache another apt has locked
        chroot(rootfs, "apt-get update -qq", what=f"image {name}: apt-get update")
        install = "apt-get install -y -qq --no-install-recommends " + " ".join(recipe.packages)
        chroot(rootfs, install, what=f"image {name}: apt-get install")


def chroot(rootfs: Path, command: str, *, what: str) -> None:
    run(["chroot", str(rootfs), "/bin/sh", "-ec", command], what=what, env=CHROOT_ENV)


def write_file(rootfs: Path, path: str, content: str, mode: int) -> None:
    target = rootfs / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    target.chmod(mode)


@contextmanager
def chroot_mounts(rootfs: Path, debs: Path) -> Iterator[None]:
    """proc, sys, dev, dev/pts and the .deb cache, unmounted on every path out, failures too.

    The cache is bind-mounted as apt's archive, so nothing in the chroot may `apt-get clean`:
    `slim` drops what debootstrap left there once the mount is gone.
    """
    mounts = [
        (["-t", "proc", "proc"], "proc"),
        (["-t", "sysfs", "sysfs"], "sys"),
        (["--bind", "/dev"], "dev"),
        (["-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts"], "dev/pts"),
        (["--bind", str(debs)], "var/cache/apt/archives"),
    ]
    with ExitStack() as stack:
        for source_args, relative in mounts:
            target = rootfs / relative
            target.mkdir(parents=True, exist_ok=True)
            run(["mount", *source_args, str(target)], what=f"mount {target}")
            stack.callback(unmount, target)
        yield


def unmount(target: Path) -> None:
    done = run(["umount", str(target)], what=f"umount {target}", check=False)
    if done.returncode != 0:  # something still holds it (a stray daemon): detach it instead
        run(["umount", "--lazy", str(target)], what=f"umount {target}")


def write_tar_atomically(name: str, rootfs: Path, tar_path: Path) -> None:
    partial = tar_path.with_name(f"{tar_path.name}.partial-{os.getpid()}")
    try:
        args = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(rootfs)]
        run([*args, "-cf", str(partial), "."], what=f"image {name}: tar")
        os.replace(partial, tar_path)
    finally:
        partial.unlink(missing_ok=True)


def remove_tree(path: Path) -> None:
    """Remove a build directory, refusing to follow into anything still mounted inside it."""
    if not path.exists():
        return
    still_mounted = mounted_under(path)
    if still_mounted:
        raise SimError(f"refusing to delete {path}: still mounted: {', '.join(still_mounted)}")
    shutil.rmtree(path)


def mounted_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts]
    return [target for target in targets if target.startswith(prefix)]
