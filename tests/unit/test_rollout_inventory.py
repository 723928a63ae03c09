"""A Playspec's ``rollout:`` and a Marquee's ``canary:`` in the YAML inventory: read as written,
left unset as none and no canary, and each bad value one line naming file, line, field and
value (an unknown key's value never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from playguard_async.desired_state.model import Inventory
from playguard_async.desired_state.rollout_policy import RolloutPolicy
from tests.support.daemon import marquee_entry
from tests.unit.test_inventory import (
    TOKEN_ENV,
    VALID,
    Rejection,
    last_line_with,
    load,
    rejection,
    write,
)

ROLLOUT = '    rollout:\n      waves: [1, "10%", "100%"]\n      bake: 30\n'
WITH_ROLLOUT = VALID.replace("    registry: reg\n", "    registry: reg\n" + ROLLOUT, 1).replace(
    "    launchable: false\n", "    launchable: false\n    canary: true\n", 1
)
WAVES = 'waves: [1, "10%", "100%"]'
WAVE = "a wave is a number of Marquees (1 to 1000000) or a percentage of the cohort"


@pytest.fixture(autouse=True)
def registry_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "token")


async def test_a_rollout_and_a_canary_are_read_as_written(tmp_path: Path) -> None:
    inventory = await load(tmp_path, WITH_ROLLOUT)
    [app] = inventory.playspecs
    assert app.rollout == RolloutPolicy(waves=[1, "10%", "100%"], bake=30)
    assert (app.rollout.max_failures, app.rollout.wave_timeout) == (0, 900.0)
    assert [(m.name, m.canary) for m in inventory.marquees] == [("m1", False), ("m2", True)]


async def test_unset_there_is_no_rollout_and_no_canary(tmp_path: Path) -> None:
    inventory = await load(tmp_path, VALID)
    assert [spec.rollout for spec in inventory.playspecs] == [None]
    assert [m.canary for m in inventory.marquees] == [False, False]


@pytest.mark.parametrize(
    "waves",
    ['["100%"]', "[1]", '[1, "1%", "10%", "100%"]', "[1000000]",
     "[" + ", ".join(map(str, range(1, 21))) + "]"],
)  # fmt: skip
async def test_every_form_of_wave_is_accepted(tmp_path: Path, waves: str) -> None:
    inventory = await load(tmp_path, WITH_ROLLOUT.replace(WAVES, f"waves: {waves}"))
    assert inventory.playspecs[0].rollout is not None


TWENTY_ONE = "waves: [" + ", ".join(map(str, range(1, 22))) + "]"

REJECTIONS = {
    "bool_as_wave": Rejection(WAVES, "waves: [true]", "waves:", "playspecs[0].rollout.waves[0]",
                              WAVE, True),
    "zero": Rejection(WAVES, "waves: [1, 0]", "waves:", "playspecs[0].rollout.waves[1]", WAVE, 0),
    "zero_percent": Rejection(WAVES, 'waves: ["0%"]', "waves:", "playspecs[0].rollout.waves[0]",
                              WAVE, "0%"),
    "over_100_percent": Rejection(WAVES, 'waves: ["101%"]', "waves:",
                                  "playspecs[0].rollout.waves[0]", WAVE, "101%"),
    "percent_with_space": Rejection(WAVES, 'waves: ["10 %"]', "waves:",
                                    "playspecs[0].rollout.waves[0]", WAVE, "10 %"),
    "fraction": Rejection(WAVES, "waves: [1.5]", "waves:", "playspecs[0].rollout.waves[0]",
                          WAVE, 1.5),  # type: ignore[arg-type]
    "twenty_one_waves": Rejection(WAVES, TWENTY_ONE, "waves:", "playspecs[0].rollout.waves",
                                  "at most 20 items", None),
    "no_waves": Rejection(WAVES, "waves: []", "waves:", "playspecs[0].rollout.waves",
                          "at least 1 item", None),
    "negative_bake": Rejection("bake: 30", "bake: -1", "bake:", "playspecs[0].rollout.bake",
                               "greater than or equal to 0", -1),
    "bake_inf": Rejection("bake: 30", "bake: .inf", "bake:", "playspecs[0].rollout.bake",
                          "finite number", float("inf")),  # type: ignore[arg-type]
    "bake_nan": Rejection("bake: 30", "bake: .nan", "bake:", "playspecs[0].rollout.bake",
                          "finite number", float("nan")),  # type: ignore[arg-type]
    "bake_over_a_day": Rejection("bake: 30", "bake: 86401", "bake:", "playspecs[0].rollout.bake",
                                 "less than or equal to 86400", 86401),
    "zero_wave_timeout": Rejection("bake: 30", "wave_timeout: 0", "wave_timeout:",
                                   "playspecs[0].rollout.wave_timeout", "greater than 0", 0),
    "negative_max_failures": Rejection("bake: 30", "max_failures: -1", "max_failures:",
                                       "playspecs[0].rollout.max_failures",
                                       "greater than or equal to 0", -1),
    "unknown_key": Rejection("bake: 30", "speed: hunter2", "speed:",
                             "playspecs[0].rollout.speed", "Extra inputs are not permitted", None),
    "text_for_rollout": Rejection(ROLLOUT, '    rollout: "10%"\n', "rollout:",
                                  "playspecs[0].rollout", "a rollout is a mapping", "10%"),
    "list_for_rollout": Rejection(ROLLOUT, "    rollout: [1, 2]\n", "rollout:",
                                  "playspecs[0].rollout", "valid dictionary", None),
    "canary_not_a_bool": Rejection("canary: true", "canary: maybe", "canary:",
                                   "marquees[1].canary", "valid boolean", "maybe"),
    "canary_a_number": Rejection("canary: true", "canary: 2", "canary:", "marquees[1].canary",
                                 "valid boolean", 2),
}  # fmt: skip


@pytest.mark.parametrize("case", REJECTIONS.values(), ids=REJECTIONS.keys())
async def test_a_bad_rollout_or_canary_names_file_line_field_and_value(
    tmp_path: Path, case: Rejection
) -> None:
    assert case.old in WITH_ROLLOUT
    text = WITH_ROLLOUT.replace(case.old, case.new, 1)
    path = write(tmp_path, text)
    error = await rejection(path)
    prefix = f"{path}:{last_line_with(text, case.line_with)}: {case.place}: "
    [problem] = [line for line in error.problems if line.startswith(prefix)]
    assert len(error.problems) == 1, error.problems
    assert case.reason in problem
    if case.value is None:
        assert "(value" not in problem
        assert "hunter2" not in problem
    else:
        assert problem.endswith(f"(value {case.value!r})")


def _fleet(names: list[str]) -> Inventory:
    return Inventory.model_validate({
        "marquees": [marquee_entry(name) for name in names],
        "playspecs": [{"name": "web", "repo": "https://git.example/web.git"}],
        "playgrounds": [{"name": f"web-{name}", "playspec": "web", "marquee": name,
                         "branch": "main"} for name in names],
    })  # fmt: skip


def test_a_narrow_read_answers_the_cohort_from_the_whole_inventory_beside_it() -> None:
    whole = _fleet([f"m{index}" for index in range(6)])
    narrow = _fleet(["m3"])  # a wake-up's read: one Marquee's rows
    assert [member.name for member in narrow.cohort("web", "main")] == ["m3"]

    narrow.cohorts_from(whole)
    later = _fleet(["m3"])
    later.cohorts_from(narrow)  # a read beside a narrow one answers from the same whole

    assert narrow.cohort("web", "main") == whole.cohort("web", "main")
    assert later.cohort("web", "main") == whole.cohort("web", "main")
    assert len(whole.cohort("web", "main")) == 6
