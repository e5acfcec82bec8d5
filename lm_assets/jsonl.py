"""JSON Lines as people's files hold them: one record per `\\n`-ended line, each line decoded on its own.

Lines break at `\\n` only (a trailing `\\r` is dropped): U+2028, U+2029 and U+0085 are valid inside
JSON strings, and `json.dumps(ensure_ascii=False)` writes them, so `str.splitlines()` would cut a
record in two and shift every later line number. A leading byte order mark is ignored. Each line is
decoded strictly as UTF-8, so one bad byte rejects that line, under its real number, and not the
whole file. A line nested deeper than `MAX_DEPTH`, or holding a lone surrogate (`"\\ud800"`: valid
JSON that no UTF-8 file or table can hold), is rejected as not JSON, like a malformed line (`loads`).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

# Arrays and objects inside one another; real records hold a few levels, and json's parser stops near 1,000.
MAX_DEPTH = 100
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class BadLine:
    """A line that could not be read: `reason` is `not_utf8` or `not_json`; `detail` says where and why."""

    reason: str
    detail: str
    text: str  # the line, decoded with U+FFFD for bytes that are not UTF-8

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


def json_lines(data: bytes) -> Iterator[tuple[int, object]]:
    """(line number, parsed JSON value or `BadLine`) for every line of `data` that is not blank."""
    data = data.removeprefix(codecs.BOM_UTF8)
    for number, raw in enumerate(data.split(b"\n"), 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, BadLine("not_utf8", f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1} is not UTF-8",
                                  raw.decode("utf-8", "replace"))  # fmt: skip
            continue
        try:
            yield number, loads(line)
        except json.JSONDecodeError as exc:
            yield number, BadLine("not_json", exc.msg, line)


def loads(text: str | bytes) -> object:
    """`json.loads(text)`, raising JSONDecodeError, as for malformed JSON, for a value nested deeper than
    `MAX_DEPTH` (where json itself would raise RecursionError) and for a string holding a lone surrogate."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", "", 0) from None
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    suspect = raw.count(b"[") + raw.count(b"{") > MAX_DEPTH or _SURROGATE_ESCAPE.search(raw)
    if suspect and (problem := _problem(value, 0)):
        raise json.JSONDecodeError(problem, "", 0)
    return value


def _problem(value, depth: int) -> str | None:
    if isinstance(value, str):
        return "a string holds a lone surrogate, which UTF-8 cannot carry" if _SURROGATE.search(value) else None
    if not isinstance(value, (list, dict)):
        return None
    if depth == MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    return next((problem for item in items if (problem := _problem(item, depth + 1))), None)


__all__ = ["MAX_DEPTH", "BadLine", "json_lines", "loads"]
