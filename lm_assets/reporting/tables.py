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


def readable(name: str) -> str:
    """An identifier as table text, in words that wrap: high_school_geography → high school geography."""
    return name.replace("_", " ")


# The UI's metadata tables at a 1600-pixel window: 14 px monospace cells, 12 px headers, 8 px padding each side,
# and a value column about 460 pixels wide where the keys are long.
CELL_CHAR_PX, HEADER_CHAR_PX, COLUMN_PADDING_PX, METADATA_COLUMN_PX = 8.4, 7.0, 16, 460


def table_width_px(df: pl.DataFrame) -> float:
    """About how wide the UI draws `df` as a markdown table: each column as wide as its longest unbreakable word
    (a header or a cell; text wraps at spaces and dashes), plus padding."""
    width = 0.0
    for name in df.columns:
        cells = [word for value in df[name].to_list() for word in re.split(r"[\s–-]+", table_cell(value))]
        widest_cell = max((len(word) for word in cells), default=0) * CELL_CHAR_PX
        widest_header = max(len(word) for word in name.split()) * HEADER_CHAR_PX
        width += max(widest_cell, widest_header) + COLUMN_PADDING_PX
    return width

