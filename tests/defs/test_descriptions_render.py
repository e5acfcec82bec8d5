"""What the UI renders as markdown keeps its angle brackets: a bare `<title>` or `<unk>` in a description is
read as an HTML tag and vanishes ("The page's , or null."), so such words are written in backticks."""

import re

import dagster as dg

from tests.defs.test_launchpad_config import location_config_classes

# An HTML tag or a token such as <unk> or <|user|>, outside a code span.
BARE_TAG = re.compile(r"<[A-Za-z/!|][^<>]*>")


def bare_tags(text: str | None) -> list[str]:
    return BARE_TAG.findall(re.sub(r"`[^`]*`", "", text or ""))


def test_bare_tags_are_found_outside_code_spans():
    assert bare_tags("The page's <title>, or null.") == ["<title>"]
    assert bare_tags("No `<unk>` on the sample; a < b > c.") == []


def shown_descriptions() -> dict[str, str]:
    from lm_assets.corpus.columns import COLUMN_DESCRIPTIONS, COLUMN_FAMILIES
    from lm_assets.definitions import defs

    shown = {f"column {name}": text for name, text in COLUMN_DESCRIPTIONS.items()}
    shown |= {f"column family {pattern.pattern}": text for pattern, text in COLUMN_FAMILIES}
    for assets_def in defs.resolve_asset_graph().assets_defs:
        for spec in assets_def.specs:
            shown[f"asset {spec.key.to_user_string()}"] = spec.description or ""
        for check in assets_def.check_specs:
            shown[f"check {check.key.name}"] = check.description or ""
    for job in defs.resolve_all_job_defs():
        shown[f"job {job.name}"] = job.description or ""
    for automation in [*defs.sensors, *defs.schedules]:
        shown[f"automation {automation.name}"] = automation.description or ""
    for cls in location_config_classes():
        for name, field in cls.model_fields.items():
            shown[f"config {cls.__name__}.{name}"] = field.description or ""
    return shown


def test_no_description_has_a_bare_angle_bracket():
    shown = shown_descriptions()
    assert {"column title", "check no_unk", "config RuleOverrides.disabled"} <= set(shown)
    assert "`<title>`" in shown["column title"]
    assert {where: bare_tags(text) for where, text in shown.items() if bare_tags(text)} == {}


def test_automation_says_what_it_runs_in_values_not_names():
    from lm_assets.defs.common.partitions import SHARDS_PER_RUN
    from lm_assets.definitions import defs

    landing = defs.resolve_sensor_def("landing_sensor").description
    assert f"{SHARDS_PER_RUN} shards a run ($LM_ASSETS_SHARDS_PER_RUN" in landing and "landed_shard_job" in landing
    schedule = defs.resolve_schedule_def("nightly_curation_refresh")
    assert schedule.execution_timezone == "UTC" and "02:00 UTC" in schedule.description
    eager = {node.key.to_user_string() for node in defs.resolve_asset_graph().asset_nodes
             if node.automation_condition is not None}
    automation = defs.resolve_sensor_def("default_automation_condition_sensor")
    assert eager >= {"minhash_signatures", "tokenized_shard"}
    assert all(name in automation.description for name in eager)


def test_sensor_descriptions_have_no_markdown():
    """The UI shows a sensor's description as plain text: a backtick would show as itself."""
    from lm_assets.definitions import defs

    sensors = {sensor.name: sensor.description or "" for sensor in defs.sensors}
    assert {"run_limit_sensor", "landing_sensor", "checkpoint_evaluation_sensor"} <= set(sensors)
    assert {name: text for name, text in sensors.items() if "`" in text} == {}
