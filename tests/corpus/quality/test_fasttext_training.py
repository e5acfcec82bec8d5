"""fastText training in a child process with zeroed allocations (corpus/quality/fasttext_training.py)."""

from __future__ import annotations

import os

import pytest

from lm_assets.corpus.quality.fasttext_training import train_fasttext_model

LINES = [f"__label__keep a clear sentence about topic {i} with words" for i in range(40)] + [
    f"__label__drop home login menu {i} next prev" for i in range(40)
]
PARAMS = {"dim": 8, "epoch": 5, "lr": 0.5, "wordNgrams": 2, "minCount": 1, "bucket": 1000, "thread": 1, "seed": 0,
          "verbose": 0, "loss": "softmax"}  # fmt: skip


def test_training_gives_the_same_model_bytes_and_leaves_this_process_alone():
    before = os.environ.get("MALLOC_PERTURB_")
    first = train_fasttext_model(LINES, PARAMS, quantize=False)
    assert first == train_fasttext_model(LINES, PARAMS, quantize=False)
    assert first[:4] == (793712314).to_bytes(4, "little")  # fastText's magic number
    assert len(train_fasttext_model(LINES, PARAMS, quantize=True)) < len(first)
    assert os.environ.get("MALLOC_PERTURB_") == before


def test_a_failed_training_says_why():
    with pytest.raises(RuntimeError, match="fastText training failed.*"):
        train_fasttext_model(LINES, {**PARAMS, "no_such_option": 1}, quantize=False)
