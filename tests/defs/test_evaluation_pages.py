"""What the pages show: a real 0 as 0 and a missing score as –, never `nan`; what is charted and what is not."""

import math

import dagster as dg
import polars as pl

from lm_assets.defs.common.reporting import markdown_table
from lm_assets.defs.evaluation.assets import score_metadata
from lm_assets.defs.evaluation.common import accuracy_chart, trend_table
from lm_assets.defs.evaluation.safety import safety_series
from lm_assets.defs.evaluation.tasks import recorded_groups
from lm_assets.reporting.evaluation import position_table
from lm_assets.reporting.tables import METADATA_COLUMN_PX, table_cell, table_width_px


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


def test_the_trend_keeps_the_latest_checkpoints_that_fit_the_metadata_column():
    subjects = {"high_school_government_and_politics": 0.3, "abstract_algebra": 0.2}
    steps = range(10, 130, 10)
    history = {f"main-step_{s:08d}": {"main/acc": dg.MetadataValue.float(s / 1000)} for s in steps}
    history["main-step_00000005"] = None  # the one scored now, re-evaluated after the others
    value = trend_table(history, scored(0.25, subjects) | {"benchmark": "mmlu"}, subjects).value
    header = [cell.strip() for cell in value.splitlines()[0].strip("|").split("|")]
    shown = header[1:]
    assert header[0] == "group" and shown[-1] == "main 5" and 2 <= len(shown) < len(history)
    assert shown[:-1] == [f"main {s}" for s in steps][-(len(shown) - 1):]  # the latest of the others
    assert f"_the latest {len(shown)} of {len(history)} evaluated checkpoints" in value
    assert "| high school government and politics |" in value
    table = pl.DataFrame({"group": ["acc", "high school government and politics"], **{c: [0.1, 0.2] for c in shown}})
    assert table_width_px(table) <= METADATA_COLUMN_PX
    few = {"main-step_00000010": {"main/acc": dg.MetadataValue.float(0.5)}, "main-step_00000020": None}
    assert "_the latest" not in trend_table(few, scored(0.4, {"anatomy": 0.3}) | {"benchmark": "cmmlu"}, {}).value


def test_a_position_no_document_reaches_has_no_perplexity():
    table = markdown_table(position_table({"0-256": {"tokens": 900, "perplexity": 812.3456},
                                           "4k+": {"tokens": 0, "perplexity": math.nan}})).value
    assert "| 4k+ | 0 | – |" in table and "nan" not in table


def banded(acc: float) -> dict:
    return {"overall": {"acc": acc, "chance_low": 0.0, "chance_high": 0.5}}


def test_one_checkpoint_is_said_not_charted_and_another_run_is_left_out():
    alone = accuracy_chart({"main-step_00000010": None}, "main-step_00000010", banded(0.25)).value
    assert "![" not in alone and "main has 1 evaluated checkpoint: acc 0.2500 at step 10" in alone
    # The sft checkpoint is not a point of main's chart: main still has one.
    sft = {"sft-step_00000040": {"sft/acc": dg.MetadataValue.float(0.5), "chance_band": dg.MetadataValue.text("0–1")}}
    assert "![" not in accuracy_chart(sft | {"main-step_00000010": None}, "main-step_00000010", banded(0.25)).value
    two = {"main-step_00000010": {"main/acc": dg.MetadataValue.float(0.2),
                                  "chance_band": dg.MetadataValue.text("0.0000–0.5000")}, "main-step_00000020": None}
    assert accuracy_chart(two, "main-step_00000020", banded(0.25)).value.startswith("![acc](data:image/svg+xml,")


def test_a_standard_error_is_shown_not_charted():
    result = {"benchmark": "mmlu", "overall": {"n": 8, "acc": 0.25, "acc_stderr": 0.1637, "acc_norm": 0.25,
                                               "chance_low": 0.0, "chance_high": 0.625},
              "categories": {}, "subjects": {"virology": {"category": "other", "n": 8, "acc": 0.25, "acc_norm": 0.25}},
              "num_fewshot": 0, "split": "test", "truncated": 0, "max_length": 64, "seconds": 1.0}  # fmt: skip
    meta = score_metadata(result, "main-step_00000010")
    assert isinstance(meta["main/acc"], dg.FloatMetadataValue)
    assert isinstance(meta["main/acc_stderr"], dg.TextMetadataValue) and meta["main/acc_stderr"].value == "0.1637"


def test_safety_charts_what_a_run_is_followed_by():
    rates = {"refusal_rate": 0.0, "over_refusal_rate": 0.0, "harmful_toxic_share": 0.0}
    summary = {"all": rates, "en": rates, "zh": rates}
    scores, unplotted = safety_series(summary, chat=False)
    assert len(scores) == 9 and set(scores) - unplotted == {"harmful_toxic_share"}
    _, unplotted = safety_series(summary, chat=True)
    assert {"refusal_rate", "over_refusal_rate", "harmful_toxic_share"}.isdisjoint(unplotted)
    assert unplotted == {f"{rate}_{lang}" for rate in rates for lang in ("en", "zh")}


def test_dpo_draws_its_reward_accuracy_and_tables_its_validation_at_one_precision():
    from lm_assets.defs.training.assets import dpo_validation_table, reward_accuracy_markdown

    history = [{"step": s, "reward_margin": 0.1 * s, "reward_accuracy": min(1.0, 0.25 * s)} for s in range(1, 6)]
    history[-1] |= {"val_reward_accuracy": 0.75, "val_reward_margin": 0.2}
    chart = reward_accuracy_markdown(history)
    assert chart.startswith("![reward accuracy](data:image/svg+xml,")
    assert "reward accuracy (green) 0.25 → 1.00 · held-back pairs 0.75 at step 5" in chart
    meta = {"val_reward_accuracy_start": dg.MetadataValue.float(0.0), "val_reward_margin_start": dg.MetadataValue.float(0.0),
            "val_kl_start": dg.MetadataValue.float(0.0), "val_reward_accuracy": dg.MetadataValue.float(0.75),
            "val_reward_margin": dg.MetadataValue.float(0.2), "val_kl": dg.MetadataValue.float(0.00012)}  # fmt: skip
    table = dpo_validation_table(meta).splitlines()
    assert table[2:] == ["| start | 0.0000 | 0.0000 | 0.0000 |", "| end | 0.7500 | 0.2000 | 0.0001 |"]
    assert dpo_validation_table({}) is None


def test_the_source_out_table_leaves_out_languages_without_labels_and_cuts_read_one_way():
    from lm_assets.corpus.curation.histograms import number
    from lm_assets.defs.common.reporting import cut_text
    from lm_assets.defs.quality.assets import cuts, transfer_table

    def figures(per_language):
        return {"balanced_accuracy": 0.8, "per_language": per_language,
                "per_label_set": {"web": {"balanced_accuracy": 0.7, "per_language": per_language}}}

    metrics = {"cross_validated": figures({"en": {"balanced_accuracy": 0.75}, "ja": {}}),
               "cross_validated_by_site": figures({"en": {"balanced_accuracy": 0.9}})}  # fmt: skip
    table = transfer_table(metrics).value
    assert "| en |" in table and "| set web, en |" in table
    assert "ja" not in table
    assert cut_text(0.317499) == number(0.317499) == "0.3175" and cut_text(100_000) == "100,000"
    assert cuts({"en": 0.317499, "zh": 0.5}) == {"en": 0.3175, "zh": 0.5}
