"""What the Marquees this replica cycles look like to Prometheus, in series that do not grow with
the fleet.

A Marquee that is fine is a count (``playguard_marquees{outcome="ok"}``); only a Marquee that is
not ok has series of its own, and at most ``shown`` of them (those not ok the longest; the rest
are one count). One scrape then costs the same at 1,000 Marquees as at 10,000 when they are fine:
the counts are kept as cycles end, and a scrape reads them and the Marquees not ok, never the
whole fleet (``bench/metrics_scrape.py``).
"""

from __future__ import annotations

import heapq
import typing
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from playguard_async.desired_state.model import Mode

NotOk = typing.Literal["failing", "locked", "rolled_back", "paused", "drifted", "release_pending"]
"""Why a Marquee is not ok: its last cycle that said anything of it failed (``failing``: any
outcome from ``phase_failed`` to ``unreachable``, the outcome label says which), another replica
held its lock ``LOCKED_TOO_LONG`` cycles in a row (``locked``), a Playground was rolled back to
its last good state (``rolled_back``), an operator's pause holds it back (``paused``), a dry run
found changes it would have made (``drifted``), all of them releases (``release_pending``: a
label value added beside ``drifted``, which kept its meaning for the host that moved, so rules
that name ``drifted`` still match what they did, less the releases)."""

HEALTHS = ("ok", "drifted", "release_pending", "failing", "paused", "unknown")
"""What the cycles said of a Marquee's health; ``unknown`` until one says anything (a Marquee
this replica has only found locked, or stopped)."""

LOCKED_TOO_LONG = 3
"""Cycles in a row that found a Marquee locked by another replica before it counts as not ok:
one or two are a replica handing over its share; more, a lease nobody releases."""


@dataclass(slots=True)
class _Seen:
    """One Marquee as this replica's cycles left it."""

    outcome: str
    health: str
    mode: str
    not_ok: NotOk | None = None
    cycles_not_ok: int = 0
    locked_in_a_row: int = 0
    last_success: float | None = None


class MarqueeSeries:
    """A prometheus-client collector of the Marquees' fleet counts and of the Marquees not ok.

    Every count's known label values start at zero, so an alert on them works before the first
    occurrence; a Marquee's own series appear when it stops being ok and go when it is ok again.
    """

    def __init__(self, *, outcomes: Iterable[str], shown: int) -> None:
        self._shown = shown
        self._seen: dict[str, _Seen] = {}
        self._not_ok: dict[str, _Seen] = {}
        self._outcomes: Counter[str] = Counter(dict.fromkeys(outcomes, 0))
        self._healths: Counter[str] = Counter(dict.fromkeys(HEALTHS, 0))
        self._modes: Counter[str] = Counter(dict.fromkeys(typing.get_args(Mode), 0))
        self._reasons: Counter[str] = Counter(dict.fromkeys(typing.get_args(NotOk), 0))

    def finished(
        self,
        marquee: str,
        outcome: str,
        health: str | None,
        finished_at: float,
        *,
        mode: str,
        rolled_back: bool,
    ) -> None:
        """A cycle of ``marquee`` ended in ``outcome``; ``health`` is what it says of the Marquee
        (None when it says nothing: another replica held it, or we stopped), ``mode`` the
        Marquee's in the desired state, ``rolled_back`` whether it rolled a Playground back."""
        seen = self._seen.get(marquee)
        if seen is None:
            seen = self._seen[marquee] = _Seen(outcome, "unknown", mode)
            self._outcomes[outcome] += 1
            self._healths["unknown"] += 1
            self._modes[mode] += 1
        else:
            _move(self._outcomes, seen.outcome, outcome)
            _move(self._modes, seen.mode, mode)
            seen.outcome, seen.mode = outcome, mode
        if health is not None:
            _move(self._healths, seen.health, health)
            seen.health = health
        if health in ("ok", "drifted", "release_pending"):
            seen.last_success = finished_at
        seen.locked_in_a_row = seen.locked_in_a_row + 1 if outcome == "locked" else 0
        self._judge(marquee, seen, health, rolled_back=rolled_back)

    def keep_only(self, share: Collection[str]) -> None:
        """Forget the Marquees not in ``share``: gone from the desired state, turned ``off``, or
        cycled by another replica now. Their counts and series would otherwise stay as they
        were, and an alert on one not ok would never end."""
        for marquee in [name for name in self._seen if name not in share]:
            seen = self._seen.pop(marquee)
            self._outcomes[seen.outcome] -= 1
            self._healths[seen.health] -= 1
            self._modes[seen.mode] -= 1
            if seen.not_ok is not None:
                self._reasons[seen.not_ok] -= 1
                del self._not_ok[marquee]

    def _judge(self, marquee: str, seen: _Seen, health: str | None, *, rolled_back: bool) -> None:
        not_ok: NotOk | None = seen.not_ok  # a cycle that says nothing changes nothing
        if rolled_back:
            not_ok = "rolled_back"
        elif health in ("failing", "paused", "drifted", "release_pending"):
            not_ok = typing.cast(NotOk, health)
        elif health == "ok":
            not_ok = None
        elif seen.locked_in_a_row >= LOCKED_TOO_LONG:
            not_ok = "locked"
        if seen.not_ok is not None:
            self._reasons[seen.not_ok] -= 1
        seen.not_ok = not_ok
        if not_ok is None:
            seen.cycles_not_ok = 0
            self._not_ok.pop(marquee, None)
            return
        self._reasons[not_ok] += 1
        seen.cycles_not_ok += 1
        self._not_ok[marquee] = seen

    def describe(self) -> Iterable[Metric]:
        """Nothing: the registry then does not call ``collect`` to learn the names at
        registration, when the Marquees are not known yet."""
        return ()

    def collect(self) -> Iterator[Metric]:
        yield _counted(
            "playguard_marquees",
            "Marquees by the outcome of their last cycle this replica ran.",
            "outcome",
            self._outcomes,
        )
        yield _counted(
            "playguard_marquees_by_health",
            "Marquees by what their cycles last said of their health (unknown: nothing yet).",
            "health",
            self._healths,
        )
        yield _counted(
            "playguard_marquees_by_mode",
            "Marquees this replica cycled, by their mode in the desired state at their last cycle.",
            "mode",
            self._modes,
        )
        yield _counted(
            "playguard_marquees_not_ok",
            "Marquees not ok, by why: all of them, those beyond the per-Marquee series included.",
            "reason",
            self._reasons,
        )
        shown = heapq.nsmallest(
            self._shown,
            self._not_ok.items(),
            key=lambda item: (-item[1].cycles_not_ok, item[0]),
        )
        not_ok = GaugeMetricFamily(
            "playguard_marquee_not_ok",
            "Cycles in a row after which the Marquee was not ok, with why and its last outcome; "
            "only Marquees not ok, the longest first, at most metrics_marquees_shown of them.",
            labels=["marquee", "reason", "outcome"],
        )
        last_success = GaugeMetricFamily(
            "playguard_marquee_last_success_timestamp_seconds",
            "When this replica last finished an ok cycle of a Marquee now not ok (Unix seconds).",
            labels=["marquee"],
        )
        for marquee, seen in shown:
            assert seen.not_ok is not None  # only those not ok are kept in _not_ok
            not_ok.add_metric([marquee, seen.not_ok, seen.outcome], seen.cycles_not_ok)
            if seen.last_success is not None:
                last_success.add_metric([marquee], seen.last_success)
        yield not_ok
        yield last_success
        yield GaugeMetricFamily(
            "playguard_marquees_not_ok_unshown",
            "Marquees not ok beyond metrics_marquees_shown: counted here, without series of "
            "their own.",
            value=len(self._not_ok) - len(shown),
        )


def _move(counts: Counter[str], old: str, new: str) -> None:
    if old != new:
        counts[old] -= 1
        counts[new] += 1


def _counted(name: str, documentation: str, label: str, counts: Counter[str]) -> Metric:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value, count in counts.items():
        family.add_metric([value], count)
    return family
