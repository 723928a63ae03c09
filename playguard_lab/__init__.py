"""Real servers on loopback for the tests and the demo: redis-server, sshd, dockerd, registry, git.

Fakes agree with whatever their author believed; the lab runs the real programs so the daemon is
tested against what it will meet. Each server is a child process in a session of its own, on a port
or socket chosen so that several labs run side by side, logging to a file in its own directory, and
stopped by its PID: nothing is daemonised, so nothing outlives `stop()`. Traffic stays on 127.0.0.1
and unix sockets; proxy settings are removed from every child's environment so that it cannot leave.

It is a package of its own beside ``playguard_async``: the tests, the demo and ``playguard lab``
(``command``, which the ``playguard`` command finds by name) import it; the runtime package never
does (an import-linter contract says so), and neither the wheel nor the container image ships it.

- ``process``: finding programs, set-up commands, a server process's life (``LabServer``)
- ``servers``: ``RedisServer``, ``SshServer``, ``DockerDaemon``, ``RegistryServer``
- ``postgres``: ``PostgresServer`` (Debian's PostgreSQL, run as its own system user when root)
- ``topologies``: ``SentinelGroup``, ``ClusterLab``, ``RedisNode`` and ``LabTls`` (Redis beyond
  one server, TLS on every link)
- ``images``: the busybox image, built here and pushed to the lab registry
- ``origin``: the git origin of the compose project (``GitOrigin``)
- ``monitoring``: ``PrometheusServer``, ``AlertmanagerServer`` and a ``WebhookReceiver``, to prove
  the alerting rules of ``deploy/prometheus/``
- ``fleet``: the whole lab at once (``Lab`` of ``MarqueeHost``s)
- ``demo``: settings and an inventory pointing the daemon at a lab
- ``command``: ``playguard lab run|up|down``
"""

from playguard_lab.demo import move_desired_state_to_postgres, write_demo_config
from playguard_lab.fleet import Lab, MarqueeHost
from playguard_lab.images import BUSYBOX_REPOSITORY, build_busybox_image, push_image
from playguard_lab.origin import GitOrigin, compose_file
from playguard_lab.postgres import PostgresServer
from playguard_lab.process import (
    LabCommandFailed,
    LabServer,
    MissingBinary,
    ServerStartFailed,
    find_binary,
    free_port,
)
from playguard_lab.servers import DockerDaemon, RedisServer, RegistryServer, SshServer

__all__ = [
    "BUSYBOX_REPOSITORY",
    "DockerDaemon",
    "GitOrigin",
    "Lab",
    "LabCommandFailed",
    "LabServer",
    "MarqueeHost",
    "MissingBinary",
    "PostgresServer",
    "RedisServer",
    "RegistryServer",
    "ServerStartFailed",
    "SshServer",
    "build_busybox_image",
    "compose_file",
    "find_binary",
    "free_port",
    "move_desired_state_to_postgres",
    "push_image",
    "write_demo_config",
]
