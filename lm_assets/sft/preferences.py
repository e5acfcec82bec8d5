"""Preference pairs: a prompt with a chosen and a rejected answer, read from JSONL or Parquet in the two
common layouts, validated and deduplicated.

- **Whole conversations** (HH-RLHF's layout): `{"chosen": ..., "rejected": ...}`, each a list of chat
  messages, or a transcript string of `\\n\\nHuman: ...` and `\\n\\nAssistant: ...` turns. Both sides
  must share every turn but the last, which is the assistant's answer.
- **Prompt and answers** (UltraFeedback-binarized's layout): `{"prompt": ..., "chosen": ...,
  "rejected": ...}`, the prompt a string (one user turn) or a list of messages, each answer a string,
  a list holding one assistant message, or the whole conversation starting with the prompt.

A pair is valid when the prompt and each answer make a valid chat example (`instructions.problem`:
known roles, turns that alternate from the user, a final assistant answer, no chat marker) and the two
answers differ. Every row is accounted for: a valid, first-seen pair becomes a row of `PAIR_SCHEMA`
(`pair_id` a hash of the prompt and both answers), every other row a record with its file, line and
reason: `not_utf8`, `not_json`, `not_an_object`, `missing_side`, `wrong_type`, `prompts_differ`,
`identical_sides`, `duplicate`, or one of `instructions.problem`'s (`no_final_answer`, ...).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable

import polars as pl

from lm_assets.jsonl import BadLine, loads
from lm_assets.sft.instructions import DROPPED_SCHEMA, MAX_CHARS, MAX_MESSAGES, problem, rows_of

PAIR_SCHEMA = {"pair_id": pl.String, "file": pl.String, "line": pl.Int64, "lang": pl.String, "source": pl.String,
               "prompt": pl.String, "chosen": pl.String, "rejected": pl.String, "text": pl.String}  # fmt: skip
_TURN = re.compile(r"\n\n(Human|Assistant): ")
_HH_ROLES = {"Human": "user", "Assistant": "assistant"}


class BadPair(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason, self.detail = reason, detail


def transcript_messages(text: str) -> list[dict]:
    """HH-RLHF's transcript (`\\n\\nHuman: hi\\n\\nAssistant: hello`) as chat messages."""
    parts = _TURN.split(text)
    if parts[0].strip() or len(parts) < 3:
        raise BadPair("wrong_type", "a transcript must start with '\\n\\nHuman: '")
    return [{"role": _HH_ROLES[role], "content": content.strip()} for role, content in zip(parts[1::2], parts[2::2])]


def _messages(value, side: str) -> list[dict]:
    if isinstance(value, str):
        return transcript_messages(value) if _TURN.match(value) else [{"role": "assistant", "content": value}]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise BadPair("wrong_type", f"{side}: a {type(value).__name__}, not a string or a list of messages")
    return [{"role": m.get("role"), "content": m.get("content")} for m in value]


def pair_of(record: dict) -> tuple[list[dict], str, str, str]:
    """(prompt messages, chosen answer, rejected answer, layout) of one row, or BadPair."""
    for side in ("chosen", "rejected"):
        value = record.get(side)
        if value is None or (isinstance(value, (str, list)) and not value):
            raise BadPair("missing_side", f"no {side}")
    chosen, rejected = _messages(record["chosen"], "chosen"), _messages(record["rejected"], "rejected")
    if "prompt" in record and record["prompt"] is not None:
        layout = "prompt_answers"
        prompt = record["prompt"]
        prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else _messages(prompt, "prompt")
        # An answer may repeat the prompt's turns before its own (UltraFeedback-binarized's chosen/rejected).
        chosen = chosen[len(prompt):] if chosen[:len(prompt)] == prompt and len(chosen) > len(prompt) else chosen
        rejected = rejected[len(prompt):] if rejected[:len(prompt)] == prompt and len(rejected) > len(prompt) else rejected
        if len(chosen) != 1 or len(rejected) != 1:
            raise BadPair("prompts_differ", "each answer must be one message after the prompt")
    else:
        layout = "conversations"
        prompt = chosen[:-1]
        if rejected[:-1] != prompt:
            raise BadPair("prompts_differ", "chosen and rejected differ before their last turn")
        chosen, rejected = chosen[-1:], rejected[-1:]
    for answer in (chosen, rejected):
        why = problem(prompt + answer, MAX_MESSAGES, MAX_CHARS)
        if why:
            raise BadPair(why)
    if chosen[0]["content"].strip() == rejected[0]["content"].strip():
        raise BadPair("identical_sides")
    return prompt, chosen[0]["content"], rejected[0]["content"], layout


def pair_id(prompt: list[dict], chosen: str, rejected: str) -> str:
    canonical = json.dumps([[[m["role"], m["content"].strip()] for m in prompt], chosen.strip(), rejected.strip()],
                           ensure_ascii=False)  # fmt: skip
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_pairs(files: Iterable[tuple[str, bytes]]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The valid, first-seen pairs of `(name, bytes)` files, and a record (`DROPPED_SCHEMA`, with
    `example_id` the pair's id where known) of every other row."""
    kept, dropped, seen = [], [], set()
    for name, data in files:
        for line, record in _rows(name, data):
            where = {"file": name, "line": line}
            if isinstance(record, BadLine):
                dropped.append(where | {"example_id": None, "reason": record.reason, "detail": record.detail})
                continue
            if not isinstance(record, dict):
                dropped.append(where | {"example_id": None, "reason": "not_an_object",
                                        "detail": f"a {type(record).__name__}"})  # fmt: skip
                continue
            try:
                prompt, chosen, rejected, layout = pair_of(record)
            except BadPair as bad:
                dropped.append(where | {"example_id": None, "reason": bad.reason, "detail": bad.detail or None})
                continue
            pid = pair_id(prompt, chosen, rejected)
            if pid in seen:
                dropped.append(where | {"example_id": pid, "reason": "duplicate", "detail": None})
                continue
            seen.add(pid)
            kept.append(where | {
                "pair_id": pid, "lang": str(record.get("lang") or ""), "source": layout,
                "prompt": json.dumps(prompt, ensure_ascii=False), "chosen": chosen, "rejected": rejected,
                "text": "\n".join([*(m["content"] for m in prompt), chosen, rejected]),
            })
    return pl.DataFrame(kept, schema=PAIR_SCHEMA), pl.DataFrame(dropped, schema=DROPPED_SCHEMA)


def _rows(name: str, data: bytes):
    """`instructions.rows_of`, with each Parquet cell that holds JSON text (a list of messages) decoded."""
    for line, record in rows_of(name, data):
        if name.endswith(".parquet") and isinstance(record, dict):
            record = dict(record)
            for side in ("chosen", "rejected", "prompt"):
                value = record.get(side)
                if isinstance(value, str) and value.lstrip().startswith(("[", "{")):
                    try:
                        record[side] = loads(value)
                    except json.JSONDecodeError as exc:
                        record = BadLine("not_json", f"{side}: {exc.msg}", value[:200])
                        break
        yield line, record


__all__ = ["PAIR_SCHEMA", "BadPair", "pair_id", "pair_of", "read_pairs", "transcript_messages"]
