"""Preference pairs packed one to a row (lm_assets/sft/packing.py's pack_pairs)."""

import json

import numpy as np

from lm_assets.sft.packing import CHOSEN, REJECTED, pack_pairs, split_of, write_preference_packed

EOS, PAD = 3, 0


def pair(pid, prompt, chosen, rejected):
    ids_c, ids_r = np.array(prompt + chosen), np.array(prompt + rejected)
    return (pid, ids_c, np.array([0] * len(prompt) + [1] * len(chosen)), ids_r,
            np.array([0] * len(prompt) + [1] * len(rejected)))


def test_each_pair_is_one_row_with_each_answer_marked_by_its_side(tmp_path):
    pairs = [pair(f"p{i}", [10, 11, 12], [20 + i, 21], [30 + i]) for i in range(40)] + [pair("long", [5] * 10, [6] * 5, [7] * 5)]
    packed, too_long = pack_pairs(pairs, seq_len=12, eos_id=EOS, pad_id=PAD, val_fraction=0.25)
    assert too_long == ["long"]
    train, val = packed["train"], packed["val"]
    assert len(train[2]) + len(val[2]) == 40 and len(val[2]) > 0
    assert all(split_of(pid, 0.25) == "val" for pid in val[2]["pair_id"])
    row = train[0][0].tolist()
    first = train[2]["pair_id"][0]
    i = int(first[1:])
    assert row == [10, 11, 12, 20 + i, 21, EOS, 10, 11, 12, 30 + i, EOS, PAD]
    assert train[1][0].tolist() == [0, 0, 0, CHOSEN, CHOSEN, 0, 0, 0, 0, REJECTED, 0, 0]
    manifest = write_preference_packed(packed, tmp_path, vocab_size=100, eos_id=EOS, pad_id=PAD, extra={"tokenizer": "x"})
    assert manifest["splits"]["train"]["chosen_tokens"] == 2 * len(train[2])
    assert manifest["splits"]["train"]["rejected_tokens"] == len(train[2])
    tokens = np.fromfile(tmp_path / "train.bin", dtype="<u2").reshape(-1, 12)
    assert tokens[0].tolist() == row and json.loads((tmp_path / "manifest.json").read_text())["seq_len"] == 12
