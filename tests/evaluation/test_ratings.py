"""People against metrics: rating sheets, ratings read back with their problems, agreement with the scores."""

import json

import polars as pl
import pytest

from lm_assets.evaluation.ratings import agreement, per_checkpoint, rating_sheet, read_ratings

SAMPLES = pl.DataFrame({"prompt": ["The capital of France is", "中国的首都是"], "greedy": [" Paris", "北京"],
                        "sampled": [" a city", "北京市"]})  # fmt: skip


def sheet_bytes(lines):
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()


def test_a_sheet_has_a_line_per_prompt_and_decoding_and_bad_lines_are_reported():
    lines = rating_sheet("main-step_1", SAMPLES)
    assert [line["sample_id"] for line in lines] == ["main-step_1/0/greedy", "main-step_1/0/sampled", "main-step_1/1/greedy",
                                                     "main-step_1/1/sampled"]  # fmt: skip
    assert lines[3]["text"] == "北京市" and lines[0]["rating"] is None
    rated = [dict(lines[0], rating=4, note="fine"), dict(lines[1], rating=6), dict(lines[2], rating=True), lines[3],
             {"sample_id": "other-step_9/0/greedy", "rating": 3}]  # fmt: skip
    data = sheet_bytes(rated) + b"not json\n\n"
    ratings, problems = read_ratings([("ratings/a.jsonl", data)], known={line["sample_id"] for line in lines})
    assert ratings.select("sample_id", "rating").rows() == [("main-step_1/0/greedy", 4), ("main-step_1/1/sampled", None)]
    assert [(p["line"], p["reason"].split(" ")[0]) for p in problems] == [(2, "rating"), (3, "rating"), (5, "sample_id"), (6, "not")]
    assert per_checkpoint(ratings).row(0, named=True) == {"checkpoint": "main-step_1", "mean_rating": 4.0, "rated": 1, "unrated": 1}


def test_lines_that_would_stop_the_reader_are_problems_with_their_line_and_the_rest_is_read():
    good = {"sample_id": "main-step_00000002/0/greedy", "rating": 4, "note": "fine"}
    lines = [good, b"[" * 100_000 + b"]" * 100_000, dict(good, note={"why": "nested"}), dict(good, note=["a list"]),
             dict(good, sample_id="../../../etc/0/greedy"), dict(good, sample_id="main-step_00000002/../greedy"),
             dict(good, sample_id="main-step_00000002/0"),
             dict(good, sample_id="main-step_00000002/1/sampled", note=None)]
    data = b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)
    ratings, problems = read_ratings([("ratings/a.jsonl", data)])
    assert ratings.select("line", "sample_id", "note").rows() == [
        (1, "main-step_00000002/0/greedy", "fine"), (8, "main-step_00000002/1/sampled", "")]
    assert [(p["file"], p["line"]) for p in problems] == [("ratings/a.jsonl", n) for n in range(2, 8)]
    reasons = [p["reason"] for p in problems]
    assert reasons[0].startswith("not JSON: nested deeper than")
    assert reasons[1] == "note is a dict, not a string" and reasons[2] == "note is a list, not a string"
    form = "is not `<checkpoint>/<prompt index>/<greedy|sampled>`"
    assert all(r.startswith("sample_id ") and form in r for r in reasons[3:])


def test_agreement_needs_three_checkpoints_and_a_score_that_varies():
    from scipy.stats import spearmanr

    table = pl.DataFrame({"checkpoint": ["a", "b", "c", "d"], "mean_rating": [1.5, 2.0, 3.5, 4.0], "rated": [4, 4, 2, 2],
                          "ppl": [90.0, 60.0, 40.0, 45.0], "flat": [0.25] * 4, "few": [0.1, 0.2, None, None]})  # fmt: skip
    found = agreement(table, {"ppl": "perplexity", "flat": "acc", "few": "rouge"})
    assert found["ppl"]["spearman"] == pytest.approx(spearmanr([1.5, 2.0, 3.5, 4.0], [90, 60, 40, 45]).statistic)
    assert found["ppl"]["checkpoints"] == 4 and found["ppl"]["rated_samples"] == 12
    assert found["flat"]["spearman"] is None and found["flat"]["why_none"] == "constant across the checkpoints"
    assert found["few"]["spearman"] is None and "2 checkpoints have both" in found["few"]["why_none"]
