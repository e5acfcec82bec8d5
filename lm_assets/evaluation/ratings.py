"""People against metrics: a checkpoint's samples rated by hand, joined back, and compared with the scores.

    lines = rating_sheet(checkpoint, samples)          # one JSON line per prompt and decoding, unrated
    ratings, problems = read_ratings(files)            # the lines people rated (1-5, a note)
    agreement(per_checkpoint)                          # correlations of mean rating with each score

A sheet line holds `sample_id` (`<checkpoint>/<prompt index>/<greedy|sampled>`), the checkpoint, the
prompt, the decoding, the text, and `rating: null, note: ""` for the rater to fill in. Reading takes
every line of every file (as `lm_assets.jsonl` reads JSON Lines); a line with a rating outside 1-5, a
note that is not a string, a sample id not of that form, or one naming no known sample, is a problem
reported with its file and line, never dropped silently; a line left unrated counts as unrated. A
sample rated twice (two raters, or two files) counts each rating.

Agreement is computed across checkpoints: each checkpoint's mean rating against each automatic score
of that checkpoint, Spearman's and Pearson's correlation, with the number of checkpoints and of rated
samples beside it. With fewer than three checkpoints rated, or a score constant across them, there is
no correlation to report, and it says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import polars as pl

from lm_assets.jsonl import BadLine, json_lines
from lm_assets.storage.keys import name_problem

DECODINGS = ("greedy", "sampled")
MIN_CHECKPOINTS = 3


def sample_id(checkpoint: str, index: int, decoding: str) -> str:
    return f"{checkpoint}/{index}/{decoding}"


def sample_id_problem(sid: str) -> str | None:
    """Why `sid` is not `<checkpoint>/<prompt index>/<decoding>`, with a checkpoint that is one safe file
    name (it names the checkpoint's samples in storage), or None."""
    parts = sid.split("/")
    if len(parts) == 3:
        checkpoint, index, decoding = parts
        if not name_problem(checkpoint) and index.isascii() and index.isdigit() and decoding in DECODINGS:
            return None
    return f"sample_id {sid!r} is not `<checkpoint>/<prompt index>/<greedy|sampled>`"


def rating_sheet(checkpoint: str, samples: pl.DataFrame) -> list[dict]:
    """The lines of a rating sheet for `checkpoint_samples`' table of a checkpoint."""
    return [
        {"sample_id": sample_id(checkpoint, i, decoding), "checkpoint": checkpoint, "prompt": row["prompt"],
         "decoding": decoding, "text": row[decoding], "rating": None, "note": ""}
        for i, row in enumerate(samples.iter_rows(named=True)) for decoding in DECODINGS
    ]  # fmt: skip


def read_ratings(files: Iterable[tuple[str, bytes]], known: set[str] | None = None) -> tuple[pl.DataFrame, list[dict]]:
    """Ratings (sample_id, checkpoint, rating, note, file) from `(name, bytes)` files, and the problems:
    lines that are not JSON, ratings outside 1-5, notes that are not strings, sample ids that are not
    `<checkpoint>/<prompt index>/<decoding>`, and, given `known`, sample ids no checkpoint wrote."""
    rows, problems = [], []
    for name, data in files:
        for number, item in json_lines(data):
            where = {"file": name, "line": number}
            if isinstance(item, BadLine):
                problems.append(where | {"reason": "not UTF-8: " + item.detail if item.reason == "not_utf8"
                                         else f"not JSON: {item.detail}"})  # fmt: skip
                continue
            if not isinstance(item, dict):
                problems.append(where | {"reason": f"not a JSON object but a {type(item).__name__}"})
                continue
            rating, sid, note = item.get("rating"), item.get("sample_id"), item.get("note")
            if not isinstance(sid, str) or not sid:
                problems.append(where | {"reason": "no sample_id"})
            elif why := sample_id_problem(sid):
                problems.append(where | {"reason": why})
            elif known is not None and sid not in known:
                problems.append(where | {"reason": f"sample_id {sid!r} names no sample of a known checkpoint"})
            elif note is not None and not isinstance(note, str):
                problems.append(where | {"reason": f"note is a {type(note).__name__}, not a string"})
            elif rating is not None and (type(rating) is not int or not 1 <= rating <= 5):  # a bool is not a rating
                problems.append(where | {"reason": f"rating {rating!r} is not a whole number from 1 to 5"})
            else:
                rows.append(where | {"sample_id": sid, "checkpoint": sid.split("/")[0], "rating": rating,
                                     "note": note or ""})  # fmt: skip
    schema = {"file": pl.String, "line": pl.Int64, "sample_id": pl.String, "checkpoint": pl.String, "rating": pl.Int64,
              "note": pl.String}  # fmt: skip
    return pl.DataFrame(rows, schema=schema), problems


def rated_pairs(ratings: pl.DataFrame, samples: Mapping[str, pl.DataFrame], margin: float) -> list[dict]:
    """Preference pairs from people's ratings: for each checkpoint and prompt whose two decodings were both
    rated (the mean of a sample's ratings), and `margin` or more apart, the prompt with the higher-rated
    text chosen and the lower rejected (`lm_assets.sft.preferences`' prompt-and-answers layout, with the
    sample ids and ratings beside them)."""
    rated = ratings.filter(pl.col("rating").is_not_null()).group_by("sample_id").agg(pl.col("rating").mean())
    means = dict(rated.iter_rows())
    pairs = []
    for checkpoint, table in sorted(samples.items()):
        for i, row in enumerate(table.iter_rows(named=True)):
            ids = [sample_id(checkpoint, i, decoding) for decoding in DECODINGS]
            scores = [means.get(sid) for sid in ids]
            if None in scores or abs(scores[0] - scores[1]) < margin:
                continue
            better = 0 if scores[0] > scores[1] else 1
            pairs.append({"prompt": row["prompt"], "chosen": row[DECODINGS[better]], "rejected": row[DECODINGS[1 - better]],
                          "chosen_sample": ids[better], "rejected_sample": ids[1 - better],
                          "chosen_rating": scores[better], "rejected_rating": scores[1 - better]})  # fmt: skip
    return pairs


def per_checkpoint(ratings: pl.DataFrame) -> pl.DataFrame:
    """Mean rating, rated and unrated lines per checkpoint."""
    return ratings.group_by("checkpoint").agg(
        pl.col("rating").mean().alias("mean_rating"),
        pl.col("rating").is_not_null().sum().alias("rated"),
        pl.col("rating").is_null().sum().alias("unrated"),
    ).sort("checkpoint")


def agreement(table: pl.DataFrame, scores: Mapping[str, str]) -> dict[str, dict]:
    """For each score column of `table` (named in `scores`: column -> what it is), the correlation of
    `mean_rating` with it across the checkpoints that have both."""
    from scipy.stats import pearsonr, spearmanr

    out = {}
    for column, meaning in scores.items():
        both = table.filter(pl.col("mean_rating").is_not_null() & pl.col(column).is_not_null() & pl.col(column).is_not_nan())
        n, rated = both.height, int(both["rated"].sum()) if both.height else 0
        row = {"score": meaning, "checkpoints": n, "rated_samples": rated, "spearman": None, "pearson": None}
        if n < MIN_CHECKPOINTS:
            row["why_none"] = f"{n} checkpoints have both; a correlation needs {MIN_CHECKPOINTS}"
        elif both[column].n_unique() == 1 or both["mean_rating"].n_unique() == 1:
            row["why_none"] = "constant across the checkpoints"
        else:
            x, y = both["mean_rating"].to_list(), both[column].to_list()
            row["spearman"] = _finite(spearmanr(x, y).statistic)
            row["pearson"] = _finite(pearsonr(x, y).statistic)
        out[column] = row
    return out


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def write_sheet(path: str | Path, lines: list[dict], force: bool = False) -> None:
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists: its ratings would be lost (pass --force to overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


__all__ = ["DECODINGS", "agreement", "per_checkpoint", "rated_pairs", "rating_sheet", "read_ratings", "sample_id",
           "sample_id_problem", "write_sheet"]
