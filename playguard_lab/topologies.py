"""Redis beyond one server, for the tests: a TLS server, a Sentinel group and a Cluster.

Each node is a ``redis-server`` of its own (``RedisNode``), started and stopped by its PID like
every lab server; a sentinel is ``redis-server --sentinel`` (the redis-sentinel binary may be
absent). Nothing persists: a node started again comes back empty, as a replacement node would.

- ``LabTls``: a self-signed certificate for 127.0.0.1, made with openssl on the spot.
- ``SentinelGroup``: one primary, two replicas, three sentinels (quorum 2), fast failure detection.
- ``ClusterLab``: three primaries with one replica each (``redis-cli --cluster create``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from redis import Redis as SyncRedis

from playguard_lab.process import (
    LabServer,
    ServerStartFailed,
    StartStop,
    find_binary,
    free_port,
    run_command,
)
from playguard_lab.servers import RedisServer

SENTINEL_SERVICE = "labprimary"
DOWN_AFTER_MS = 1000
"""How long the sentinels (and cluster nodes) wait before they call an unanswering node down."""
_POLL = 0.05


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; TimeoutError naming ``what`` when it does not in time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"lab: {what} not within {timeout:g} s")
        time.sleep(_POLL)


CLUSTER_BUS_OFFSET = 10000
"""A cluster node also listens on its port + 10000 (the cluster bus), so its port is at most
55535."""


def free_cluster_port() -> int:
    """A free port whose cluster-bus twin is free too."""
    while True:
        port = free_port()
        if port + CLUSTER_BUS_OFFSET > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
            try:
                bus.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
            except OSError:
                continue
        return port


def start_on_a_free_port(
    server: RedisNode | SentinelServer, choose: Callable[[], int], attempts: int = 3
) -> None:
    """Start ``server``; a port taken between choosing it and binding it (an outgoing connection
    of another server of the lab, a replica's to its primary, can land on any ephemeral port)
    is chosen again with ``choose``. Called before anyone is told the port: a topology forms
    (cluster create, the sentinels' URL) after its servers start."""
    for attempt in range(attempts):
        try:
            server.start()
            return
        except ServerStartFailed:
            taken = "Address already in use" in server.log_path.read_text(errors="replace")
            if not taken or attempt == attempts - 1:
                raise
            server.log_path.unlink(missing_ok=True)
            server.move_to(choose())


class LabTls:
    """A throwaway self-signed certificate for IP 127.0.0.1; it is its own CA."""

    def __init__(self, workdir: Path) -> None:
        openssl = find_binary("openssl", "openssl")
        workdir.mkdir(parents=True, exist_ok=True)
        self.cert = workdir / "redis.crt"
        self.key = workdir / "redis.key"
        if not self.cert.exists():
            run_command([
                openssl, "req", "-x509", "-nodes", "-newkey", "ec",
                "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-keyout", str(self.key), "-out", str(self.cert), "-days", "2",
                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            ])  # fmt: skip

    def server_args(self) -> list[str]:
        """redis-server options for TLS on every link: clients, replication, cluster bus."""
        return [
            "--tls-cert-file", str(self.cert),
            "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.cert),
            "--tls-auth-clients", "no",
            "--tls-replication", "yes",
            "--tls-cluster", "yes",
        ]  # fmt: skip

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert))


def lab_client(port: int, tls: LabTls | None, timeout: float) -> SyncRedis:
    """A synchronous client of one lab process on 127.0.0.1 (a node or a sentinel)."""
    options = {"ssl": True, "ssl_ca_certs": str(tls.cert)} if tls else {}
    return SyncRedis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        **options,  # type: ignore[arg-type]
    )


class RedisNode(RedisServer):
    """A redis-server with options of its own (replicaof, cluster, TLS); with ``tls`` it listens
    for TLS only, on ``port``."""

    def __init__(
        self,
        workdir: Path,
        *,
        extra_args: Sequence[str] = (),
        tls: LabTls | None = None,
        port: int | None = None,
    ) -> None:
        super().__init__(workdir, port)
        self.tls = tls
        self.extra_args = list(extra_args)
        self.url = self._url()

    def move_to(self, port: int) -> None:
        """Listen on ``port`` from the next start."""
        self.port = port
        self.url = self._url()

    def _url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        command = super()._command()
        if self.tls is not None:
            at = command.index("--port")
            command[at : at + 2] = ["--port", "0", "--tls-port", str(self.port)]
            command += self.tls.server_args()
        # A replica's first sync waits 5 s by default for others to share it: not in a lab.
        return [*command, "--repl-diskless-sync-delay", "0", *self.extra_args]

    def _ready(self) -> bool:
        return self.answers_ping()

    def answers_ping(self) -> bool:
        try:
            with contextlib.ExitStack() as stack:
                sock = stack.enter_context(
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
                )
                if self.tls is not None:
                    sock = stack.enter_context(
                        self.tls.context().wrap_socket(sock, server_hostname="127.0.0.1")
                    )
                sock.sendall(b"PING\r\n")
                return sock.recv(5).startswith(b"+PONG")
        except OSError:
            return False

    def client(self, timeout: float = 2.0) -> SyncRedis:
        """A plain client of this node alone, for the lab's own set-up and checks."""
        return lab_client(self.port, self.tls, timeout)

    def ask(self, *command: str | int) -> object:
        with self.client() as client:
            return client.execute_command(*command)

    def role(self) -> str:
        """``master`` or ``slave`` as the node says, ``down`` when it does not answer."""
        try:
            with self.client() as client:
                answer = client.execute_command("ROLE")
        except Exception:
            return "down"
        role = answer[0]
        return role.decode() if isinstance(role, bytes) else str(role)

    def set_options(self, extra_args: Sequence[str]) -> None:
        """The options of the next start (a restarted node rejoining as a replica)."""
        self.extra_args = list(extra_args)


def online_replicas(primary: RedisNode) -> int:
    """Replicas the node says are in sync with it (state online); 0 when it does not answer."""
    try:
        with primary.client() as client:
            info = client.info("replication")
    except Exception:
        return 0
    return sum(
        1
        for key, value in info.items()
        if key.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    )


class SentinelServer(LabServer):
    """``redis-server CONFIG --sentinel`` watching one primary. Sentinel rewrites its config
    file as it learns; the file is written once, so a restarted sentinel keeps what it learnt."""

    name = "sentinel"

    def __init__(self, workdir: Path, primary_port: int, tls: LabTls | None = None) -> None:
        super().__init__(workdir)
        self._binary = find_binary("redis-server", "redis-server")
        self.port = free_port()
        self.primary_port = primary_port
        self.tls = tls
        self.config = self.workdir / "sentinel.conf"

    def _prepare(self) -> None:
        if self.config.exists():
            return
        port = f"port 0\ntls-port {self.port}\n" if self.tls else f"port {self.port}\n"
        tls = (
            "".join(f"{name[2:]} {value}\n" for name, value in _pairs(self.tls.server_args()))
            if self.tls
            else ""
        )
        s = SENTINEL_SERVICE
        self.config.write_text(
            f"bind 127.0.0.1\n{port}{tls}dir {self.workdir}\n"
            f"sentinel monitor {s} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {s} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {s} 4000\n"
            f"sentinel parallel-syncs {s} 2\n"
        )

    def _command(self) -> list[str]:
        return [self._binary, str(self.config), "--sentinel", "--daemonize", "no", "--logfile", ""]

    def move_to(self, port: int) -> None:
        """Listen on ``port`` from the next start (the config is written again)."""
        self.port = port
        self.config.unlink(missing_ok=True)

    def client(self, timeout: float = 2.0) -> SyncRedis:
        return lab_client(self.port, self.tls, timeout)

    def primary_address(self) -> tuple[str, int] | None:
        """Where this sentinel says the primary is now, or None when it does not answer."""
        try:
            with self.client() as client:
                found = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
        except Exception:
            return None
        if not found:
            return None
        host, port = found
        return (host.decode() if isinstance(host, bytes) else str(host), int(port))

    def _ready(self) -> bool:
        return self.primary_address() is not None


def _pairs(args: Sequence[str]) -> list[tuple[str, str]]:
    return list(zip(args[::2], args[1::2], strict=True))


class SentinelGroup(StartStop):
    """One primary, two replicas and three sentinels (quorum 2) on loopback.

    ``url`` is the ``redis+sentinel://`` form the daemon reads. ``fail_primary()`` SIGKILLs the
    primary and waits for the sentinels to promote a replica; ``heal()`` brings the dead node
    back as a replica of the new primary, so every test starts from a full group.
    """

    def __init__(self, workdir: Path, *, tls: LabTls | None = None) -> None:
        self.workdir = workdir
        self.tls = tls
        self.nodes = [RedisNode(workdir / f"node-{index}", tls=tls) for index in range(3)]
        primary_port = self.nodes[0].port
        for node in self.nodes[1:]:
            node.set_options(["--replicaof", "127.0.0.1", str(primary_port)])
        self.sentinels = [
            SentinelServer(workdir / f"sentinel-{index}", primary_port, tls) for index in range(3)
        ]
        self.url = self._url()

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            wait_for(lambda: online_replicas(self.primary()) == 2, 20, "two replicas online")
            for sentinel in self.sentinels:
                start_on_a_free_port(sentinel, free_port)
            self.url = self._url()  # a sentinel's port may have changed
            wait_for(self._sentinels_agree, 20, "three sentinels that know each other")
        except BaseException:
            self.stop()
            raise

    def _url(self) -> str:
        scheme = "rediss+sentinel" if self.tls else "redis+sentinel"
        where = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"{scheme}://{where}/{SENTINEL_SERVICE}/0"

    def stop(self) -> None:
        for server in [*self.sentinels, *self.nodes]:
            server.stop()

    def primary(self) -> RedisNode:
        """The node the sentinels name as primary now."""
        for sentinel in self.sentinels:
            if sentinel.running and not sentinel.paused:
                address = sentinel.primary_address()
                if address is not None:
                    return next(node for node in self.nodes if node.port == address[1])
        return self.nodes[0]

    def replicas(self) -> list[RedisNode]:
        primary = self.primary()
        return [node for node in self.nodes if node is not primary]

    def _replicas_online(self, primary: RedisNode) -> int:
        try:
            info = primary.client().info("replication")
        except Exception:
            return 0
        return sum(
            1
            for key, value in info.items()
            if key.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        )

    def _sentinels_agree(self) -> bool:
        try:
            for sentinel in self.sentinels:
                with sentinel.client() as client:
                    state = client.sentinel_master(SENTINEL_SERVICE)
                if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 2:
                    return False
        except Exception:
            return False
        return True

    def cut_replicas(self) -> None:
        """Stop replication without the sentinels noticing a failed primary: the replicas are
        paused (SIGSTOP) and the primary drops their links, so writes from now on reach the
        primary alone; ``fail_primary()`` then promotes a replica that never saw them."""
        primary = self.primary()
        for replica in self.replicas():
            replica.pause()
        primary.ask("CLIENT", "KILL", "TYPE", "replica")

    def fail_primary(self, timeout: float = 30.0) -> RedisNode:
        """SIGKILL the primary, resume any paused replica, and return the replica the sentinels
        promote in its place."""
        old = self.primary()
        old.kill()
        for node in self.nodes:
            if node.paused:
                node.resume()
        wait_for(lambda: self._settled_primary() not in (None, old), timeout, "a failover")
        new = self._settled_primary()
        assert new is not None
        return new

    def _settled_primary(self) -> RedisNode | None:
        """The primary once every live sentinel names the same node and it says it is one (two
        sentinels may promote two replicas in turn before they agree)."""
        named = {s.primary_address() for s in self.sentinels if s.running and not s.paused}
        if len(named) != 1 or None in named:
            return None
        [(_, port)] = named  # type: ignore[misc]
        node = next(node for node in self.nodes if node.port == port)
        return node if node.role() == "master" else None

    def heal(self, timeout: float = 30.0) -> None:
        """Every node running and online: a dead one restarts as a replica of the primary."""
        primary = self.primary()
        for node in self.nodes:
            if node.paused:
                node.resume()
            if not node.running:
                node.set_options(["--replicaof", "127.0.0.1", str(primary.port)])
                node.start()
        wait_for(lambda: online_replicas(self.primary()) == 2, timeout, "two replicas online")
        wait_for(self._sentinels_agree, timeout, "sentinels agreeing again")


class ClusterLab(StartStop):
    """Three primaries with one replica each, made by ``redis-cli --cluster create``.

    ``url`` is the ``redis+cluster://`` form with every node as a startup node.
    """

    def __init__(self, workdir: Path, *, tls: LabTls | None = None) -> None:
        self.workdir = workdir
        self.tls = tls
        self._cli = find_binary("redis-cli", "redis-tools")
        self.nodes = [
            RedisNode(
                workdir / f"node-{index}",
                tls=tls,
                port=free_cluster_port(),
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(workdir / f"node-{index}" / "nodes.conf"),
                    "--cluster-node-timeout",
                    str(DOWN_AFTER_MS * 2),
                ],
            )
            for index in range(6)
        ]
        self.url = self._url()

    def _url(self) -> str:
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        return f"{scheme}://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> None:
        try:
            for node in self.nodes:
                (node.workdir / "nodes.conf").unlink(missing_ok=True)
                start_on_a_free_port(node, free_cluster_port)
            self.url = self._url()  # the nodes' ports may have changed
            tls = ["--tls", "--cacert", str(self.tls.cert)] if self.tls else []
            run_command([
                self._cli, *tls, "--cluster", "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas", "1", "--cluster-yes",
            ], timeout=60)  # fmt: skip
            wait_for(self.healthy, 30, "cluster_state:ok on every node with 3 replicas")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def healthy(self) -> bool:
        try:
            for node in self.nodes:
                info = node.ask("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
            return len(self.replicas()) == 3 and all(
                online_replicas(primary) >= 1 for primary in self.primaries()
            )
        except Exception:
            return False

    def _node_table(self) -> list[list[str]]:
        for node in self.nodes:
            if node.running and not node.paused:
                with contextlib.suppress(Exception):
                    raw = node.ask("CLUSTER", "NODES")
                    text = raw.decode() if isinstance(raw, bytes) else str(raw)
                    return [line.split() for line in text.splitlines() if line.strip()]
        return []

    def _by_address(self, address: str) -> RedisNode:
        port = int(address.split("@", maxsplit=1)[0].rsplit(":", 1)[1])
        return next(node for node in self.nodes if node.port == port)

    def node_id(self, node: RedisNode) -> str:
        return next(row[0] for row in self._node_table() if self._by_address(row[1]) is node)

    def primaries(self) -> list[RedisNode]:
        rows = self._node_table()
        return [
            self._by_address(row[1]) for row in rows if "master" in row[2] and "fail" not in row[2]
        ]

    def replicas(self) -> list[RedisNode]:
        rows = self._node_table()
        return [
            self._by_address(row[1]) for row in rows if "slave" in row[2] and "fail" not in row[2]
        ]

    def replicas_of(self, primary: RedisNode) -> list[RedisNode]:
        rows = self._node_table()
        primary_id = next(row[0] for row in rows if self._by_address(row[1]) is primary)
        return [
            self._by_address(row[1])
            for row in rows
            if "slave" in row[2] and "fail" not in row[2] and row[3] == primary_id
        ]

    def owner_of(self, slot: int) -> RedisNode:
        for row in self._node_table():
            if "master" not in row[2]:
                continue
            for span in row[8:]:
                if span.startswith("["):
                    continue
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return self._by_address(row[1])
        raise LookupError(f"lab: no primary serves slot {slot}")

    def move_slot(
        self, slot: int, target: RedisNode, *, between: Callable[[], None] | None = None
    ) -> None:
        """Reshard one slot to ``target`` the way redis-cli does it: IMPORTING/MIGRATING, MIGRATE
        of its keys, then SETSLOT NODE everywhere. ``between`` runs while the slot is half moved."""
        source = self.owner_of(slot)
        if source is target:
            raise ValueError(f"lab: slot {slot} is already on {target.port}")
        source_id, target_id = self.node_id(source), self.node_id(target)
        target.ask("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.ask("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        if between is not None:
            between()
        while keys := source.ask("CLUSTER", "GETKEYSINSLOT", slot, 100):
            source.ask("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)  # type: ignore[misc]
        for node in (target, source, *self.primaries()):
            node.ask("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(lambda: self.owner_of(slot) is target, 10, f"slot {slot} owned by {target.port}")
