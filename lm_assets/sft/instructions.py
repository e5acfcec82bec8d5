"""Instruction examples: chat messages read from JSONL or Parquet, validated, deduplicated.

An example is `{"messages": [{"role": ..., "content": ...}, ...]}` (other keys are kept as `lang` when
given). It is valid when:
- every message has a role of `system`, `user` or `assistant` and non-empty string content;
- a system message, if any, comes first and only once;
- then user and assistant alternate, starting with the user and ending with the assistant;
- no message spells a chat marker (`<|end|>`, ...), which the chat format keeps for itself;
- it has at most `max_messages` messages and `max_chars` characters of content.

Every row is accounted for: the valid ones become examples (`example_id`: a hash of the messages),
the others a quarantine record with their file, line (a Parquet file's row; 0 for the whole file) and
reason. JSONL is read as `lm_assets.jsonl` reads it: a line that is not UTF-8 is `not_utf8`, one nested too
deep `not_json`. Exact duplicates (the same messages after trimming whitespace) keep their first occurrence;
the others are dropped as `duplicate`.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable

import polars as pl

from lm_assets.jsonl import BadLine, json_lines, loads
from lm_assets.sft.chat import spells_marker

ROLES = ("system", "user", "assistant")
EXAMPLE_SCHEMA = {"example_id": pl.String, "file": pl.String, "line": pl.Int64, "lang": pl.String,
                  "messages": pl.String, "text": pl.String}  # fmt: skip
DROPPED_SCHEMA = {"file": pl.String, "line": pl.Int64, "example_id": pl.String, "reason": pl.String,
                  "detail": pl.String}  # fmt: skip
MAX_MESSAGES = 256
MAX_CHARS = 200_000


def problem(messages, max_messages: int = MAX_MESSAGES, max_chars: int = MAX_CHARS) -> str | None:
    """Why `messages` is not a valid chat example, or None."""
    if not isinstance(messages, list) or not messages:
        return "messages_not_a_list"
    if len(messages) > max_messages:
        return "too_many_messages"
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return "unknown_role"
        if not isinstance(m.get("content"), str) or not m["content"].strip():
            return "empty_content"
        if spells_marker(m["content"]):
            return "chat_marker"
    if sum(len(m["content"]) for m in messages) > max_chars:
        return "too_many_chars"
    roles = [m["role"] for m in messages]
    if "system" in roles[1:]:
        return "system_not_first"
    turns = roles[1:] if roles[0] == "system" else roles
    if not turns or any(r != ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(turns)):
        return "turns_do_not_alternate"
    if turns[-1] != "assistant":
        return "no_final_answer"
    return None


def example_id(messages: list[dict]) -> str:
    canonical = json.dumps([[m["role"], m["content"].strip()] for m in messages], ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def rows_of(name: str, data: bytes) -> Iterable[tuple[int, object]]:
    """(line or row number, record) of a JSONL or Parquet file; what cannot be read gives a `BadLine`
    (a Parquet file that cannot be read at all: row 0)."""
    if not name.endswith(".parquet"):
        yield from json_lines(data)
        return
    try:
        rows = pl.read_parquet(io.BytesIO(data)).to_dicts()
    except Exception as exc:  # polars raises several types for a corrupt file
        yield 0, BadLine("not_parquet", f"{type(exc).__name__}: {exc}"[:300], "")
        return
    for i, row in enumerate(rows, 1):
        messages = row.get("messages")
        if isinstance(messages, str):
            try:
                messages = loads(messages)
            except json.JSONDecodeError as exc:
                yield i, BadLine("not_json", f"messages: {exc.msg}", messages[:200])
                continue
        yield i, {**row, "messages": messages}


def read_examples(files: Iterable[tuple[str, bytes]], max_messages: int = MAX_MESSAGES,
                  max_chars: int = MAX_CHARS) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """The valid, first-seen examples of `(name, bytes)` files, and a record of every other row."""
    kept, dropped, seen = [], [], set()
    for name, data in files:
        for line, record in rows_of(name, data):
            if isinstance(record, BadLine):
                dropped.append({"file": name, "line": line, "example_id": None, "reason": record.reason,
                                "detail": record.detail})  # fmt: skip
                continue
            messages = record.get("messages") if isinstance(record, dict) else None
            why = problem(messages, max_messages, max_chars)
            if why:
                dropped.append({"file": name, "line": line, "example_id": None, "reason": why})
                continue
            messages = [{"role": m["role"], "content": m["content"]} for m in messages]
            eid = example_id(messages)
            if eid in seen:
                dropped.append({"file": name, "line": line, "example_id": eid, "reason": "duplicate"})
                continue
            seen.add(eid)
            kept.append({"example_id": eid, "file": name, "line": line, "lang": str(record.get("lang") or ""),
                         "messages": json.dumps(messages, ensure_ascii=False),
                         "text": "\n".join(m["content"] for m in messages)})  # fmt: skip
    return pl.DataFrame(kept, schema=EXAMPLE_SCHEMA), pl.DataFrame(dropped, schema=DROPPED_SCHEMA)


__all__ = ["DROPPED_SCHEMA", "EXAMPLE_SCHEMA", "MAX_CHARS", "MAX_MESSAGES", "ROLES", "example_id", "problem", "read_examples", "rows_of"]
