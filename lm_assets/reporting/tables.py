"""Markdown tables as the pages show them: numbers at three significant digits, nothing as –, never `nan`."""

from __future__ import annotations

import math
import re

import numpy as np
import polars as pl


def significant(value: float, digits: int = 3) -> str:
    """`value` rounded to `digits` significant digits, written without an exponent: 0.000123, 0.253, 12,300."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    rounded = float(f"{value:.{digits}g}")
    if abs(rounded) >= 10 ** (digits - 1):
        return f"{rounded:,.0f}"
    return np.format_float_positional(rounded, trim="-")


def table_cell(value) -> str:
    """A markdown table cell: floats at 3 significant digits, nothing (None, or a float that is not a number)
    as –, never `nan`, a real 0 as 0; line breaks shown as ↵, a run of three or more as ↵×N."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = significant(value) if isinstance(value, float) else str(value)
    text = re.sub(r"\n{3,}", lambda run: f" ↵×{len(run.group())} ", text)
    return text.replace("|", "\\|").replace("\n", " ↵ ")


def markdown_table_text(df: pl.DataFrame, max_rows: int = 20) -> str:
    """`df` as a markdown table of its first `max_rows` rows, and how many more there are; `_none_` if empty."""
    if df.height == 0:
        return "_none_"
    head = df.head(max_rows)
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    for row in head.iter_rows():
        lines.append("| " + " | ".join(table_cell(v) for v in row) + " |")
    if df.height > max_rows:
        lines.append(f"\n_{df.height - max_rows} more rows_")
    return "\n".join(lines)
