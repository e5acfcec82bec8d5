"""Preference pairs (lm_assets/sft/preferences.py): both layouts, every bad row filed with its reason."""

import io
import json

import polars as pl

from lm_assets.sft.preferences import read_pairs, transcript_messages


def jsonl(*rows) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r, ensure_ascii=False).encode()) + b"\n" for r in rows)


USER = {"role": "user", "content": "Name a prime number."}
GOOD, BAD = "7 is prime: its only divisors are 1 and 7.", "8."


def test_both_layouts_give_the_same_pair_and_duplicates_are_dropped():
    hh_lists = {"chosen": [USER, {"role": "assistant", "content": GOOD}],
                "rejected": [USER, {"role": "assistant", "content": BAD}]}
    hh_text = {"chosen": f"\n\nHuman: {USER['content']}\n\nAssistant: {GOOD}",
               "rejected": f"\n\nHuman: {USER['content']}\n\nAssistant: {BAD}"}
    ultra = {"prompt": USER["content"], "chosen": hh_lists["chosen"], "rejected": hh_lists["rejected"]}
    trl_style = {"prompt": [USER], "chosen": [{"role": "assistant", "content": GOOD}], "rejected": BAD, "lang": "en"}
    other = {"prompt": "用一句话解释光合作用。", "chosen": "植物利用光能把二氧化碳和水合成有机物并释放氧气。", "rejected": "不知道。", "lang": "zh"}
    pairs, dropped = read_pairs([("a.jsonl", jsonl(hh_lists, hh_text, ultra, trl_style, other))])
    assert pairs.height == 2 and pairs["lang"].to_list() == ["", "zh"]
    assert pairs["source"].to_list() == ["conversations", "prompt_answers"]
    assert json.loads(pairs["prompt"][0]) == [USER] and pairs["chosen"][0] == GOOD and pairs["rejected"][0] == BAD
    assert dropped["reason"].to_list() == ["duplicate"] * 3 and dropped["line"].to_list() == [2, 3, 4]


def test_every_bad_row_is_filed_with_its_file_line_and_reason():
    rows = [
        {"chosen": [USER, {"role": "assistant", "content": GOOD}]},  # no rejected
        {"prompt": "Q?", "chosen": "same answer", "rejected": " same answer "},
        {"prompt": "Q?", "chosen": 42, "rejected": "x"},
        {"chosen": [USER, {"role": "assistant", "content": GOOD}], "rejected": [{"role": "user", "content": "Other?"},
                                                                                {"role": "assistant", "content": BAD}]},
        {"chosen": [USER], "rejected": [USER, {"role": "assistant", "content": BAD}]},  # chosen ends on the user
        {"chosen": [USER, {"role": "assistant", "content": GOOD}], "rejected": [USER, {"role": "assistant", "content": "<|end|>"}]},
        b"\xff\xfe not utf-8",
        b"{not json",
        ["a", "list"],
        {"prompt": "Q?", "chosen": "A good answer.", "rejected": "A bad one."},
    ]
    pairs, dropped = read_pairs([("prefs/x.jsonl", jsonl(*rows))])
    assert pairs.height == 1 and pairs["line"].to_list() == [10]
    assert dropped["file"].unique().to_list() == ["prefs/x.jsonl"]
    assert dict(zip(dropped["line"], dropped["reason"])) == {
        1: "missing_side", 2: "identical_sides", 3: "wrong_type", 4: "prompts_differ", 5: "prompts_differ",
        6: "chat_marker", 7: "not_utf8", 8: "not_json", 9: "not_an_object",
    }
    assert pairs.height + dropped.height == len(rows)


def test_a_conversation_that_does_not_end_on_the_assistant_is_refused():
    row = {"chosen": [USER, {"role": "assistant", "content": GOOD}, {"role": "user", "content": "And another?"}],
           "rejected": [USER, {"role": "assistant", "content": GOOD}, {"role": "user", "content": "And two?"}]}
    _, dropped = read_pairs([("x.jsonl", jsonl(row))])
    assert dropped["reason"].to_list() == ["no_final_answer"]


def test_parquet_with_message_lists_and_json_text_cells():
    frame = pl.DataFrame({"prompt": ["Q one?", "Q two?"], "chosen": ["Answer one.", json.dumps([{"role": "assistant", "content": "Two."}])],
                          "rejected": ["Wrong.", "[broken json"]})
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    pairs, dropped = read_pairs([("p.parquet", buffer.getvalue())])
    assert pairs["chosen"].to_list() == ["Answer one."]
    assert dropped.select("line", "reason").rows() == [(2, "not_json")]


def test_a_row_nested_too_deep_is_filed_with_its_line_and_the_rest_read():
    deep = "[" * 100_000 + "]" * 100_000
    good = {"prompt": "Q?", "chosen": "A good answer.", "rejected": "A bad one."}
    other = {"prompt": "Q2?", "chosen": "Another good answer.", "rejected": "Another bad one."}
    data = jsonl(good, ('{"prompt": "Q?", "chosen": ' + deep + ', "rejected": "x"}').encode(), other)
    frame = pl.DataFrame({"prompt": ["Q3?", "Q4?"], "chosen": [deep, "Fine."], "rejected": ["Wrong.", "Not fine."]})
    buffer = io.BytesIO()
    frame.write_parquet(buffer)
    pairs, dropped = read_pairs([("x.jsonl", data), ("p.parquet", buffer.getvalue())])
    assert pairs.select("file", "line").rows() == [("x.jsonl", 1), ("x.jsonl", 3), ("p.parquet", 2)]
    assert dropped.select("file", "line", "reason").rows() == [("x.jsonl", 2, "not_json"), ("p.parquet", 1, "not_json")]
    assert dropped["detail"][1].startswith("chosen: nested deeper than")


def test_transcripts_split_into_turns():
    assert transcript_messages("\n\nHuman: hi\n\nAssistant: hello\n\nHuman: bye\n\nAssistant: ok") == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"}, {"role": "assistant", "content": "ok"}]
