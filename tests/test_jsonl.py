"""JSON Lines readers (labels, instructions, ratings): lines break at \\n only, a BOM is ignored, and one
bad byte rejects one line under its real number."""

import codecs
import json

from lm_assets.corpus.quality.labels import read_label_file
from lm_assets.evaluation.ratings import read_ratings
from lm_assets.jsonl import BadLine, json_lines
from lm_assets.sft.instructions import read_examples

# Valid inside JSON strings, written as-is by json.dumps(ensure_ascii=False); str.splitlines() breaks at each.
SEPARATORS = "a\u2028b\u2029c\x85d\x1ce"


def lines_of(*rows) -> bytes:
    """A BOM, rows as JSON with the separators inside a string, a line with one bad byte, then more rows."""
    encoded = [r if isinstance(r, bytes) else json.dumps(r, ensure_ascii=False).encode() for r in rows]
    return codecs.BOM_UTF8 + b"\n".join(encoded) + b"\r\n"


def test_lines_break_at_newline_only_and_a_bad_byte_costs_one_line():
    data = lines_of({"x": SEPARATORS}, b'{"x": "caf\xe9"}', b"", {"x": 3})
    found = list(json_lines(data))
    assert [n for n, _ in found] == [1, 2, 4]
    assert found[0][1] == {"x": SEPARATORS} and found[2][1] == {"x": 3}
    assert isinstance(found[1][1], BadLine) and found[1][1].reason == "not_utf8" and "0xe9" in found[1][1].detail
    assert found[1][1].text == '{"x": "caf\ufffd"}'


def test_labels_keep_rows_with_line_separators_and_their_numbers():
    data = lines_of({"url": "https://x.example/a", "label": "KEEP", "reason": SEPARATORS},
                    b'{"url": "https://x.example/b", "label": "DROP", "reason": "\xff"}',
                    {"url": "https://x.example/c", "label": "DROP"})
    labels, rejected = read_label_file(data, "team.jsonl")
    assert labels.select("line", "url").rows() == [(1, "https://x.example/a"), (3, "https://x.example/c")]
    assert rejected.select("line").to_series().to_list() == [2] and rejected["reason"][0].startswith("not UTF-8")


def test_instructions_keep_rows_with_line_separators_and_quarantine_bad_bytes_as_not_utf8():
    chat = {"messages": [{"role": "user", "content": f"Split {SEPARATORS}?"}, {"role": "assistant", "content": "No."}]}
    bad = b'{"messages": [{"role": "user", "content": "caf\xe9"}, {"role": "assistant", "content": "ok"}]}'
    other = {"messages": [{"role": "user", "content": "Next?"}, {"role": "assistant", "content": "Yes."}]}
    kept, dropped = read_examples([("chat.jsonl", lines_of(chat, bad, other))])
    assert kept.select("line").to_series().to_list() == [1, 3]
    assert json.loads(kept["messages"][0])[0]["content"] == f"Split {SEPARATORS}?"
    assert dropped.select("line", "reason").rows() == [(2, "not_utf8")]
    assert "\ufffd" not in "".join(kept["text"])


def test_ratings_keep_rows_with_line_separators_and_report_bad_lines_by_number():
    rated = {"sample_id": "main-step_1/0/greedy", "rating": 4, "note": SEPARATORS}
    data = lines_of(rated, b'{"sample_id": "main-step_1/0/sampled", "rating": 2, "note": "\xfe"}',
                    [rated], {"sample_id": "main-step_1/1/greedy", "rating": 5})
    ratings, problems = read_ratings([("ratings/a.jsonl", data)])
    assert ratings.select("line", "rating", "note").rows() == [(1, 4, SEPARATORS), (4, 5, "")]
    assert [(p["line"], p["reason"]) for p in problems] == [
        (2, "not UTF-8: byte 0xfe at column 62 is not UTF-8"), (3, "not a JSON object but a list")]


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_line_nested_too_deep_or_holding_half_a_surrogate_is_not_json_under_its_number():
    from lm_assets.jsonl import MAX_DEPTH

    found = list(json_lines(b'{"x": 1}\n' + DEEP + b'\n{"x": "\\ud800"}\n{"x": "\\ud83d\\ude00"}\n[[[[1]]]]\n'))
    assert [n for n, _ in found] == [1, 2, 3, 4, 5]
    deep, surrogate = found[1][1], found[2][1]
    assert isinstance(deep, BadLine) and deep.reason == "not_json" and deep.detail.startswith("nested deeper than")
    assert isinstance(surrogate, BadLine) and surrogate.reason == "not_json" and "surrogate" in surrogate.detail
    assert found[3][1] == {"x": "\U0001f600"} and found[4][1] == [[[[1]]]]
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert [type(value) for _, value in json_lines(deepest + b"\n[" + deepest + b"]\n")] == [list, BadLine]


def test_instructions_quarantine_a_line_nested_too_deep_and_read_the_rest():
    chat = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}
    other = {"messages": [{"role": "user", "content": "Next?"}, {"role": "assistant", "content": "Yes."}]}
    kept, dropped = read_examples([("chat.jsonl", lines_of(chat, DEEP, other))])
    assert kept.select("line").to_series().to_list() == [1, 3]
    assert dropped.select("line", "reason").rows() == [(2, "not_json")]
