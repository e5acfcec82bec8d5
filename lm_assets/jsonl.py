"""JSON Lines as people's files hold them: one record per `\\n`-ended line, each line decoded on its own.

Lines break at `\\n` only (a trailing `\\r` is dropped): U+2028, U+2029 and U+0085 are valid inside
JSON strings, and `json.dumps(ensure_ascii=False)` writes them, so `str.splitlines()` would cut a
record in two and shift every later line number. A leading byte order mark is ignored. Each line is
decoded strictly as UTF-8, so one bad byte rejects that line, under its real number, and not the
whole file.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass


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
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
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
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, BadLine("not_json", exc.msg, line)


__all__ = ["BadLine", "json_lines"]
