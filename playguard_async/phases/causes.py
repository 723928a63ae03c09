"""Why a running Playground is changed, in the glossary's words (``kits.vocabulary``): the one
place a phase decides whether a change is a release, drift, a pin or a hold.

The line between a release and drift is the Playground's last verified input set: inputs (files,
override, images behind tags) that are not the ones last verified healthy mean the desired state
moved, a release (a Playground never verified is on its first release); the same inputs with
containers that differ mean the host moved, drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from playguard_async.cycle_record import NoticeKind, PlaygroundFinding
from playguard_async.kits.vocabulary import Cause
from playguard_async.phases.holds import Hold
from playguard_async.phases.protocol import Notice
from playguard_async.remote.last_good import LastGood


@dataclass(frozen=True)
class ChangeCause:
    """A change's cause and, in a few words, what moved (``commit 81fc54f -> 3491e24``)."""

    cause: Cause
    detail: str

    def __str__(self) -> str:
        return f"{self.cause.word}: {self.detail}"


def change_cause(
    good: LastGood | None,
    *,
    inputs: str,
    files: dict[str, str],
    commit: str | None,
    hold: Hold | None,
    drift: list[str],
) -> ChangeCause:
    """Why a running Playground whose ``drift`` calls for a change is changed: ``good`` its last
    good state, ``inputs`` its input set now, ``files`` their digests (``compose``, ``env``)
    and ``commit`` the commit its checkout is (or in a dry run will be) at."""
    if good is None:
        return ChangeCause(Cause.RELEASE, f"first deploy at {_short(commit)}")
    if good.inputs == inputs:
        return ChangeCause(Cause.DRIFT, "; ".join(drift))
    if hold is not None:
        return ChangeCause(Cause.PIN if hold.pin is not None else Cause.HOLD, hold.shown)
    was = good.revision.commit
    if was is not None and commit is not None and was != commit:
        return ChangeCause(Cause.RELEASE, f"commit {_short(was)} -> {_short(commit)}")
    if files.get("env") != good.revision.env:
        return ChangeCause(Cause.RELEASE, "settings changed (.env)")
    if files.get("compose") != good.compose:
        return ChangeCause(Cause.RELEASE, "settings changed (compose file)")
    return ChangeCause(Cause.RELEASE, "an image behind a tag or a setting moved")


def put_down_cause(finding: PlaygroundFinding) -> ChangeCause:
    """Why a Playground taken down or stopped was: the desired state says so (expired, stopped,
    its branch gone: a release), or a rollout does (its aborted release has nothing before it
    to go back to: a hold)."""
    why = "; ".join(finding.drift)
    return ChangeCause(Cause.HOLD if finding.held_by is not None else Cause.RELEASE, why)


CHANGE_NOTICES = {
    Cause.RELEASE: NoticeKind.RELEASE,
    Cause.DRIFT: NoticeKind.DRIFT,
    Cause.PIN: NoticeKind.PIN,
    Cause.HOLD: NoticeKind.HOLD,
}
"""The notice each cause of a change is told by; a rollback has its own (``rolled_back``,
``unhealthy`` while kept there), told where it happens."""


def change_notices(playground: str, cause: ChangeCause, drift: tuple[str, ...]) -> list[Notice]:
    """The notices of a Playground changed for ``cause``: drift, one a thing found wrong on the
    host; any other cause, one saying what moved."""
    kind = CHANGE_NOTICES.get(cause.cause)
    if kind is None:
        return []
    details = list(drift) if cause.cause is Cause.DRIFT else [cause.detail]
    return [Notice(kind, playground, detail) for detail in details]


def _short(commit: str | None) -> str:
    return "?" if commit is None else commit[:7]
