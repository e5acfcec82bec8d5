"""The evaluation pages' pieces in plain text: samples tables with their marks explained, the position
perplexity table, the chance band as every page writes it, and the accuracy chart across checkpoints."""

from __future__ import annotations

import polars as pl

from lm_assets.charts import INLINE_LIMIT, inline_line_chart
from lm_assets.reporting.tables import markdown_table_text


def band_text(overall: dict) -> str:
    """The chance band as every page writes it: `0.1300–0.3800`."""
    return f"{overall['chance_low']:.4f}–{overall['chance_high']:.4f}"


def against_band(acc: float | None, band: str | None) -> str | None:
    """Where `acc` lies against a chance band written by `band_text`: above, inside or below it."""
    if acc is None or not band:
        return None
    low, high = map(float, band.split("–"))
    return "above" if acc > high else "below" if acc < low else "inside"


SAMPLE_MARKS = (
    ("…", "…: the prompt was cut at its start to fit the context"),
    ("↵", "↵: a line break the model wrote (↵×N: N of them)"),
    ("[EOS]", "[EOS]: the model ended its text there"),
    ("⟨0x", "⟨0x91⟩ and the like: a byte the model wrote that forms no UTF-8 character"),
)


def samples_table(samples: pl.DataFrame, cell_chars: int | None = None) -> str:
    """prompt | greedy | sampled, each cell cut to `cell_chars` if given, a prompt cut to fit the context
    marked "…", a continuation that ended at EOS marked "[EOS]" (else an empty one would read as a missing
    one); under the table, what each mark in it means."""
    def cut(column: str) -> pl.Expr:
        return pl.col(column) if cell_chars is None else pl.col(column).str.slice(0, cell_chars)

    def ended(column: str) -> pl.Expr:
        return cut(column) + pl.when(pl.col(f"{column}_stop") == "eos").then(pl.lit(" [EOS]")).otherwise(pl.lit(""))

    table = markdown_table_text(samples.select(
        pl.when(pl.col("prompt_truncated")).then("…" + cut("prompt")).otherwise(cut("prompt")).alias("prompt"),
        ended("greedy"), ended("sampled"),
    ), max_rows=100)
    body = table.split("\n", 2)[-1]
    marks = [meaning for mark, meaning in SAMPLE_MARKS if mark in body]
    return table + (f"\n\n_{'; '.join(marks)}_" if marks else "")


def inline_samples_table(samples: pl.DataFrame) -> str:
    """The samples table short enough for the UI to show in place (1,000 characters of markdown), its cells
    cut, whatever the checkpoint writes; the whole table is `samples_full`."""
    for width in (60, 40, 28, 20, 14, 10):
        shown = samples_table(samples, width)
        if len(shown) <= INLINE_LIMIT:
            return shown
    return samples_table(samples.head(3), 10)


def position_table(buckets: dict[str, dict]) -> pl.DataFrame:
    """positions | tokens | perplexity; a bucket no document reaches has no perplexity (–), not `nan`."""
    return pl.DataFrame([{"positions": name, "tokens": b["tokens"],
                          "perplexity": round(b["perplexity"], 2) if b["tokens"] else None} for name, b in buckets.items()],
                        schema_overrides={"perplexity": pl.Float64})  # fmt: skip


def accuracy_chart_markdown(run: str, acc: list[tuple[int, float]], band: list[tuple[int, tuple[float, float]]]) -> str:
    """acc by step of `run`'s checkpoints, the chance band shaded under it; with fewer than two checkpoints, a
    line saying so (and the one score), not an empty chart."""
    if len(acc) < 2:
        scored = f": acc {acc[0][1]:.4f} at step {acc[0][0]}" if acc else ""
        return (f"_{run} has {len(acc)} evaluated checkpoint{'' if len(acc) == 1 else 's'}{scored}; "
                "the chart is drawn from two on_")
    caption = f"{run}: acc by step (blue) over the chance band (grey) of each checkpoint"
    return inline_line_chart("acc", caption, [(acc, "blue")], band=band)
