"""A daemon in a network namespace of its own, wired to the lab's servers, and black holes on it.

Why a namespace: the faults networks make (a link that drops packets without a RST, so every socket
waits for its own timeout; TCP delivering a command late, by a retransmission after the link came
back) need real packets dropped by the kernel, and a DROP rule must touch nothing but the daemon
under test. Inside its own namespace a rule does.

The wiring: a veth pair joins the namespace to this one, ``169.254.B.C+1/30`` on this side and
``.C+2`` inside (link-local addresses on a link that joins nothing but the namespace, so no packet
can be routed anywhere else). Inside, a connection to ``127.0.0.1:PORT`` of a wired lab port is
DNATed to this side's address and SNATed to the inside one; here, what arrives on the veth is
DNATed and SNATed to ``127.0.0.1`` (``route_localnet`` on both ends lets loopback addresses cross
the link). So the daemon uses the very addresses (and ``known_hosts``) every other test uses, and
the servers see a loopback client as ever (Redis's protected mode, PostgreSQL's pg_hba). The
daemon's own HTTP endpoints bind the inside address, which this side reaches over the veth.

A black hole is an iptables DROP (never REJECT: no RST, no ICMP) in the namespace's filter table:
OUTPUT by destination port cuts what the daemon sends, INPUT by source port what it receives.

``network_namespace()`` removes the namespace (the veth goes with it) and this side's NAT rules
on the way out, however the test ended; ``leftover_namespaces()`` is the session's check that none
the suite made is still there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Direction = Literal["out", "in", "both"]
"""What a black hole drops: what the daemon sends (``out``), receives (``in``), or both."""

_MADE: list[str] = []
"""Every namespace this process made, for ``leftover_namespaces``."""

_LINKS_PER_PROCESS = 64
"""/30 links a test process can have, each with a number of its own (see ``_link_number``)."""

_FIRST_THIRD_OCTET = 170
"""Links live in 169.254.170.0 to 169.254.255.255: above 169.254.169.254, the address clouds
serve their metadata on, which a /30 here would take over."""


def _run(*argv: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    done = subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} (netns {namespace}): {done.stderr.strip()}")


_LINKS = (256 - _FIRST_THIRD_OCTET) * _LINKS_PER_PROCESS

_ALLOCATION_LOCK = Path("/run/lock/playguard-test-netns.lock")
"""Held while a link is chosen and its address set, so that concurrent test processes (two
sessions, a soak) never pick the same /30: two would share a route and lose each other's
packets."""


def _link_addresses(number: int) -> tuple[str, str]:
    third = _FIRST_THIRD_OCTET + number // _LINKS_PER_PROCESS
    fourth = (number % _LINKS_PER_PROCESS) * 4
    return f"169.254.{third}.{fourth + 1}", f"169.254.{third}.{fourth + 2}"


def _free_link(serial: int) -> int:
    """A /30 no interface here uses yet, looked for from one the pid and ``serial`` suggest."""
    listed = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True)
    used = {word.split("/")[0] for word in listed.stdout.split() if word.startswith("169.254.")}
    start = (os.getpid() * _LINKS_PER_PROCESS + serial) % _LINKS
    for offset in range(_LINKS):
        number = (start + offset) % _LINKS
        if _link_addresses(number)[0] not in used:
            return number
    raise RuntimeError(f"no free /30 left for a test namespace among {_LINKS}")


@dataclass
class Namespace:
    """One namespace wired to this one; see the module's doc."""

    name: str
    outside: str
    """This side's address on the veth: DNATed to 127.0.0.1 here."""
    inside: str
    """The namespace's address: where its daemon's HTTP endpoints listen."""
    veth: str
    _wired: list[int] = field(default_factory=list)
    _holes: set[tuple[int, str]] = field(default_factory=set)
    _nat_here: list[list[str]] = field(default_factory=list)

    @property
    def exec_prefix(self) -> list[str]:
        """What runs a command inside: the command's own pid stays (``ip netns exec`` execs)."""
        return ["ip", "netns", "exec", self.name]

    def wire(self, *ports: int) -> None:
        """Make ``127.0.0.1:PORT`` inside reach the lab server on that port here."""
        for port in ports:
            if port in self._wired:
                continue
            _run(
                "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", "127.0.0.1",
                "--dport", str(port), "-j", "DNAT", "--to-destination", self.outside,
                namespace=self.name,
            )  # fmt: skip
            self._wired.append(port)

    def black_hole(self, port: int, direction: Direction = "both") -> None:
        """Drop, silently, the daemon's packets to (``out``) and from (``in``) ``port``."""
        for rule in self._rules(port, direction):
            if rule not in self._holes:
                _run("iptables", "-I", *self._drop(rule), namespace=self.name)
                self._holes.add(rule)

    def lift(self, port: int, direction: Direction = "both") -> None:
        """Let the packets through again; what TCP held back is retransmitted from now on."""
        for rule in self._rules(port, direction):
            if rule in self._holes:
                _run("iptables", "-D", *self._drop(rule), namespace=self.name)
                self._holes.discard(rule)

    @staticmethod
    def _rules(port: int, direction: Direction) -> list[tuple[int, str]]:
        chains = {"out": ["OUTPUT"], "in": ["INPUT"], "both": ["OUTPUT", "INPUT"]}[direction]
        return [(port, chain) for chain in chains]

    @staticmethod
    def _drop(rule: tuple[int, str]) -> list[str]:
        port, chain = rule
        match = "--dport" if chain == "OUTPUT" else "--sport"
        return [chain, "-p", "tcp", match, str(port), "-j", "DROP"]

    def _open(self, serial: int) -> None:
        """Make the namespace, its veth and the NAT on both ends (see the module's doc)."""
        inner = f"{self.veth}i"
        _run("ip", "netns", "add", self.name)
        _MADE.append(self.name)
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", self.name)
        _ALLOCATION_LOCK.parent.mkdir(parents=True, exist_ok=True)
        with _ALLOCATION_LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.outside, self.inside = _link_addresses(_free_link(serial))
            _run("ip", "addr", "add", f"{self.outside}/30", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        _run("sysctl", "-qw", f"net.ipv4.conf.{self.veth}.route_localnet=1")
        for argv in (
            ["ip", "addr", "add", f"{self.inside}/30", "dev", inner],
            ["ip", "link", "set", inner, "up"],
            ["ip", "link", "set", "lo", "up"],
            ["sysctl", "-qw", f"net.ipv4.conf.{inner}.route_localnet=1"],
            ["iptables", "-t", "nat", "-A", "POSTROUTING", "-o", inner, "-j", "SNAT",
             "--to-source", self.inside],
        ):  # fmt: skip
            _run(*argv, namespace=self.name)
        for rule in (
            ["PREROUTING", "-i", self.veth, "-p", "tcp", "-d", self.outside, "-j", "DNAT",
             "--to-destination", "127.0.0.1"],
            ["INPUT", "-i", self.veth, "-p", "tcp", "-d", "127.0.0.1", "-j", "SNAT",
             "--to-source", "127.0.0.1"],
        ):  # fmt: skip
            _run("iptables", "-t", "nat", "-A", *rule)
            self._nat_here.append(rule)

    def close(self) -> None:
        """Remove this side's rules and the namespace (its veth, rules and sockets go with it);
        every step is tried whatever the one before did."""
        errors: list[str] = []
        for rule in self._nat_here:
            with contextlib.suppress(RuntimeError):
                _run("iptables", "-t", "nat", "-D", *rule)
        self._nat_here.clear()
        for argv in (["ip", "netns", "delete", self.name], ["ip", "link", "delete", self.veth]):
            try:
                _run(*argv)
            except RuntimeError as error:
                errors.append(str(error))
        if self.name in namespaces():
            raise RuntimeError(f"netns {self.name} survived its removal: {errors}")


_serial = iter(range(1 << 30))


@contextlib.contextmanager
def network_namespace(ports: Sequence[int] = ()) -> Iterator[Namespace]:
    """A fresh namespace wired to the lab servers on ``ports`` (more with ``wire``), removed on
    the way out however the block ended."""
    serial = next(_serial)
    tag = f"{os.getpid():x}{serial:x}"
    namespace = Namespace(name=f"pgnet-{tag}", outside="", inside="", veth=f"pg{tag}")
    try:
        namespace._open(serial)
        namespace.wire(*ports)
        yield namespace
    finally:
        namespace.close()


def namespaces() -> set[str]:
    """The named network namespaces there are now."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


def leftover_namespaces() -> list[str]:
    """The namespaces this process made that are still there (the session's last check)."""
    if not _MADE:
        return []
    there = namespaces()
    return [name for name in _MADE if name in there]


__all__ = ["Direction", "Namespace", "leftover_namespaces", "namespaces", "network_namespace"]
