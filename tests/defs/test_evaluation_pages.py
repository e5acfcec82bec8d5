"""What the evaluation pages show: a real 0 as 0 and a missing score as –, never `nan`."""

import math

import dagster as dg

from lm_assets.defs.common.reporting import markdown_table, table_cell
from lm_assets.defs.evaluation.assets import position_table, trend_table
from lm_assets.defs.evaluation.tasks import recorded_groups


def test_a_cell_reads_0_for_zero_and_a_dash_for_nothing():
    assert [table_cell(v) for v in (0.0, 0, None, math.nan, 0.25)] == ["0", "0", "–", "–", "0.25"]


def scored(acc: float, subjects: dict[str, float]) -> dict:
    return {"benchmark": "hellaswag", "overall": {"acc": acc},
            "subjects": {name: {"acc": value} for name, value in subjects.items()}}  # fmt: skip


def rows(value: str) -> dict[str, list[str]]:
    lines = value.splitlines()
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


def test_the_trend_of_a_one_subject_task_reads_its_zeros_as_zeros():
    # main-step_10/20/30 scored 0, recorded as main/acc alone (one subject: no per-subject key); this one 0.25.
    history = {f"main-step_{s:08d}": {"main/acc": dg.MetadataValue.float(0.0)} for s in (10, 20, 30)} | {"main-step_00000040": None}
    result = scored(0.25, {"hellaswag": 0.25})
    table = rows(trend_table(history, result, recorded_groups(result)).value)
    assert table == {"acc": ["0", "0", "0", "0.25"]}


def test_the_trend_shows_a_group_not_recorded_on_a_checkpoint_as_a_dash():
    history = {"main-step_00000010": {"main/acc": dg.MetadataValue.float(0.5), "main/cmmlu/anatomy": dg.MetadataValue.float(0.0)},
               "main-step_00000020": None}  # fmt: skip
    result = scored(0.4, {"anatomy": 0.3, "virology": 0.5}) | {"benchmark": "cmmlu"}
    table = rows(trend_table(history, result, recorded_groups(result)).value)
    assert table == {"acc": ["0.5", "0.4"], "anatomy": ["0", "0.3"], "virology": ["–", "0.5"]}
    assert "nan" not in trend_table(history, result, recorded_groups(result)).value


def test_a_position_no_document_reaches_has_no_perplexity():
    table = markdown_table(position_table({"0-256": {"tokens": 900, "perplexity": 812.3456},
                                           "4k+": {"tokens": 0, "perplexity": math.nan}})).value
    assert "| 4k+ | 0 | – |" in table and "nan" not in table
