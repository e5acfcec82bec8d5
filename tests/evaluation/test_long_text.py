"""Held-out documents read whole: perplexity by position, and continuations scored against the text."""

import os

import numpy as np
import polars as pl
import pytest
import torch

from lm_assets.evaluation.checkpoint import EvalModel
from lm_assets.evaluation.long_text import (
    Document,
    bucket_name,
    continuation_scores,
    position_perplexity,
    validation_documents,
)
from lm_assets.training.config import from_preset
from lm_assets.training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)

TEXTS = [
    "The river flows past the old mill and under the stone bridge, and the miller counts the sacks of flour. ",
    "河水流过老磨坊，从石桥下面穿过，磨坊主人数着一袋袋面粉。",
]


@pytest.fixture(scope="module")
def em(tmp_path_factory):
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer

    tok = train_tokenizer(TEXTS * 20, TokenizerConfig(vocab_size=400, num_threads=1, hard_vocab_limit=False),
                          tmp_path_factory.mktemp("tok"))  # fmt: skip
    sp = tok.processor()
    model = Transformer(from_preset("tiny", sp.get_piece_size(), max_seq_len=600), seed=1).eval()
    return EvalModel(model, sp)


def test_bucket_names():
    assert [bucket_name(0, 256), bucket_name(256, 1024), bucket_name(1024, 4096), bucket_name(4096, None)] == [
        "0-256", "256-1k", "1k-4k", "4k+"]


def test_each_target_counts_in_the_bucket_of_its_position(em):
    ids = np.array(em.tokenizer.encode(TEXTS[0] * 30), dtype=np.int64)
    assert len(ids) > 300
    buckets = position_perplexity(em, [Document("d", "en", ids)], ((0, 100), (100, 250), (250, None)))
    with torch.no_grad():
        row = torch.from_numpy(ids[: em.max_length + 1])
        loss = torch.nn.functional.cross_entropy(em.model(row[None, :-1])[0], row[1:], reduction="none").double()
    # A target at index t of the document has t tokens before it: targets 1..99, 100..249, 250..
    expected = [loss[:99], loss[99:249], loss[249:]]
    assert [b["tokens"] for b in buckets.values()] == [99, 150, len(row) - 250]
    for b, part in zip(buckets.values(), expected):
        assert b["nll"] == pytest.approx(float(part.sum()), rel=1e-6)
        assert b["perplexity"] == pytest.approx(float(part.mean().exp()), rel=1e-6)
    assert np.isnan(position_perplexity(em, [Document("d", "en", ids[:50])], ((0, 10), (60, None)))["60+"]["perplexity"])


def test_validation_documents_are_the_longest_held_out_ones_whole():
    tokens = np.arange(100, dtype=np.uint16)
    index = pl.DataFrame({"doc_id": ["a", "b", "c", "d"], "offset": [0, 10, 40, 45], "length": [10, 30, 5, 55]})
    segments = pl.DataFrame({"doc_id": ["b", "b", "c", "d", "a"], "shard": ["s"] * 5})  # pieces of the val split
    docs = validation_documents(segments, lambda shard: (tokens, index), {"b": "en", "d": "zh"}, min_tokens=10, max_documents=2)
    assert [(d.doc_id, d.lang, len(d.tokens)) for d in docs] == [("d", "zh", 55), ("b", "en", 30)]
    assert docs[1].tokens.tolist() == list(range(10, 40))


def test_continuations_score_rouge_and_bleu_per_language(em):
    from rouge_score import rouge_scorer

    from lm_assets.evaluation.long_text import _Characters

    zh = "河水流过老磨坊，从石桥下面穿过。"
    assert rouge_scorer.RougeScorer(["rougeL"]).score(zh, zh)["rougeL"].fmeasure == 0.0  # its tokenizer drops Chinese
    assert rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Characters()).score(zh, zh)["rougeL"].fmeasure == 1.0
    docs = [Document(f"{lang}{i}", lang, np.array(em.tokenizer.encode(text * 6), dtype=np.int64))
            for i in range(2) for lang, text in zip(("en", "zh"), TEXTS)]  # fmt: skip
    result = continuation_scores(em, docs, prompt_tokens=20, new_tokens=10)
    assert result["documents"] == 4 and set(result["by_lang"]) == {"en", "zh"}
    row = result["rows"][0]
    assert row["reference"] == em.tokenizer.decode(docs[0].tokens[20:30].tolist())
    assert 0.0 <= row["rouge_l_f1"] <= 1.0 and row["bleu"] >= 0.0
    for lang in ("en", "zh"):
        mine = [r for r in result["rows"] if r["lang"] == lang]
        assert result["by_lang"][lang]["rouge_l_f1"] == pytest.approx(np.mean([r["rouge_l_f1"] for r in mine]))
    short = continuation_scores(em, [Document("x", "en", docs[0].tokens[:25])], prompt_tokens=20, new_tokens=10)
    assert (short["documents"], short["skipped_short"]) == (0, 1)
