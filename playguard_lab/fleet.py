"""The whole lab at once: Redis, N Marquee hosts, a registry holding the busybox image and a git
origin whose compose project uses that image, started together and stopped together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from playguard_lab.images import BUSYBOX_REPOSITORY, build_busybox_image, push_image
from playguard_lab.origin import GitOrigin
from playguard_lab.process import LabServer, StartStop
from playguard_lab.servers import DockerDaemon, RedisServer, RegistryServer, SshServer


@dataclass(frozen=True)
class MarqueeHost:
    """One simulated Docker host: reached over SSH, its engine behind a unix socket."""

    name: str
    ssh: SshServer
    docker: DockerDaemon


class Lab(StartStop):
    """Everything the daemon needs around it: Redis, N marquees, a registry holding the busybox
    image, and a git origin whose compose project uses that image."""

    local_image_tag = "playguard-lab/busybox:local"

    def __init__(
        self, workdir: Path, marquees: int = 1, *, ssh_max_startups: int | None = None
    ) -> None:
        self.workdir = workdir.absolute()
        self.redis = RedisServer(self.workdir / "redis")
        self.registry = RegistryServer(self.workdir / "registry")
        self.marquees = [
            MarqueeHost(
                name=f"marquee-{i}",
                ssh=SshServer(self.workdir / f"m{i}" / "ssh", max_startups=ssh_max_startups),
                docker=DockerDaemon(self.workdir / f"m{i}" / "docker", index=i),
            )
            for i in range(marquees)
        ]
        self.image = f"{self.registry.address}/{BUSYBOX_REPOSITORY}"
        self._git: GitOrigin | None = None

    @property
    def git(self) -> GitOrigin:
        if self._git is None:
            raise RuntimeError("the git origin exists once Lab.start() has run")
        return self._git

    def servers(self) -> list[LabServer]:
        servers: list[LabServer] = [self.redis, self.registry]
        for marquee in self.marquees:
            servers += [marquee.ssh, marquee.docker]
        return servers

    def start(self) -> None:
        try:
            for server in self.servers():
                server.start()
            if self.marquees:
                builder = self.marquees[0].docker
                build_busybox_image(builder, self.local_image_tag)
                push_image(builder, self.registry, self.local_image_tag)
            self._git = GitOrigin(self.workdir / "git", self.image)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops every server, even those that never started or failed to; reports all failures."""
        errors: list[Exception] = []
        for server in reversed(self.servers()):
            try:
                server.stop()
            except Exception as exc:  # one failure must not leave the rest running
                errors.append(exc)
        if errors:
            raise ExceptionGroup("the lab did not stop cleanly", errors)
