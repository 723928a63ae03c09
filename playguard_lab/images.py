"""The lab's one image, made on this machine from busybox-static and pushed to the lab registry
with a real login: the lab pulls nothing from outside."""

from __future__ import annotations

import io
import struct
import tarfile
from pathlib import Path

from playguard_lab.process import MissingBinary, find_binary, run_command
from playguard_lab.servers import DockerDaemon, RegistryServer

BUSYBOX_REPOSITORY = "playguard/busybox:1"


def _is_static_executable(path: Path) -> bool:
    """The image has no dynamic loader, so a dynamically linked busybox would not even start."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return False
    order = "<" if data[5] == 1 else ">"
    if data[4] == 2:  # ELFCLASS64
        (phoff,) = struct.unpack_from(f"{order}Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(f"{order}I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(f"{order}HH", data, 0x2A)
    pt_interp = 3
    return all(
        struct.unpack_from(f"{order}I", data, phoff + i * phentsize)[0] != pt_interp
        for i in range(phnum)
    )


def _busybox_rootfs_tar(busybox: Path) -> bytes:
    applets = run_command([str(busybox), "--list"]).split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.size, info.linkname = kind, mode, len(data), link
            tar.addfile(info, io.BytesIO(data) if data else None)

        for directory, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777)):
            add(directory, tarfile.DIRTYPE, mode)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes())
        for applet in applets:
            if applet != "busybox":
                add(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\n")
    return buffer.getvalue()


def build_busybox_image(
    docker: DockerDaemon, tag: str, *, env: dict[str, str] | None = None
) -> None:
    """A runnable image made on this machine from busybox-static: the lab pulls nothing from
    outside. ``env`` sets variables in the image's config, which makes images that differ
    (one a healthcheck passes on, one it fails on) from the same files."""
    busybox = Path(find_binary("busybox", "busybox-static"))
    if not _is_static_executable(busybox):
        raise MissingBinary(str(busybox), "busybox-static", "is dynamically linked")
    changes = ["--change", 'CMD ["sh"]']
    for name, value in sorted((env or {}).items()):
        changes += ["--change", f"ENV {name}={value}"]
    docker.cli("import", *changes, "-", tag, stdin=_busybox_rootfs_tar(busybox))


def push_image(
    docker: DockerDaemon,
    registry: RegistryServer,
    source_tag: str,
    repository: str = BUSYBOX_REPOSITORY,
) -> str:
    """Push through the daemon with a real login, so the registry holds the image exactly as the
    marquees will pull it; returns the remote reference."""
    remote = f"{registry.address}/{repository}"
    docker.cli(
        "login", "--username", registry.username, "--password-stdin", registry.address,
        stdin=registry.password.encode(),
    )  # fmt: skip
    docker.cli("tag", source_tag, remote)
    docker.cli("push", remote)
    return remote
