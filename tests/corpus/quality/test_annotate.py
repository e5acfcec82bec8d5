"""`lm-assets label`: a seeded sample of a shard to label by hand, and scores from a tiny local LM."""

import json

import polars as pl
import pytest
import torch

from lm_assets.app.cli import main
from lm_assets.corpus.quality.annotate import TEXT_CAP, LMAnnotator, sample_for_labelling
from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.storage.store import Storage
from lm_assets.training.export import export_tokenizer

torch.set_num_threads(1)

VOCAB = 320
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Score: 0 1 2 3 4 5 points for each extract of a web page.",
    "Add another point if the extract is coherent prose that a reader learns from.",
    "Install the package, then run the command with --help to list its options.",
] * 4


def documents(n: int) -> pl.DataFrame:
    return pl.DataFrame({
        "doc_id": [f"doc-{i:03d}" for i in range(n)],
        "url": [f"https://example.org/page/{i}" for i in range(n)],
        "source": ["crawl"] * n,
        "text": [f"Page {i} explains how to set the thing up.\nIt has two more sentences. This one." for i in range(n)],
        "title": [f"Page {i}" if i % 3 else None for i in range(n)],
        "lang_hint": ["en"] * n,
    })  # fmt: skip


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "storage"
    monkeypatch.setenv("LM_ASSETS_STORAGE_ROOT", str(root))
    monkeypatch.chdir(tmp_path)
    store = Storage(str(root))
    store.write_parquet("extracted/shard-a/documents.parquet", documents(30))
    return store


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_sample_writes_unlabelled_lines(store, tmp_path):
    assert main(["label", "--shard", "shard-a", "--sample", "5"]) == 0
    lines = read_lines(tmp_path / "labels-shard-a-5.jsonl")
    assert len(lines) == 5 and len({line["doc_id"] for line in lines}) == 5
    for line in lines:
        assert set(line) == {"doc_id", "url", "lang_hint", "title", "text", "label", "confidence", "source"}
        assert (line["label"], line["confidence"], line["source"]) == (None, None, "human")
        assert line["text"].startswith("Page ") and line["url"].startswith("https://example.org/")


def test_sample_is_deterministic_by_seed():
    docs = documents(50)
    first = sample_for_labelling(docs, 10, seed=0)
    assert first == sample_for_labelling(docs, 10, seed=0)
    assert first == sample_for_labelling(docs.reverse(), 10, seed=0)
    assert [d["doc_id"] for d in first] != [d["doc_id"] for d in sample_for_labelling(docs, 10, seed=1)]
    assert len(sample_for_labelling(docs, 80, seed=0)) == 50


def test_long_text_is_capped_with_a_note():
    docs = documents(1).with_columns(pl.lit("x" * (TEXT_CAP + 500)).alias("text"))
    [line] = sample_for_labelling(docs, 1, seed=0)
    assert line["text"].startswith("x" * TEXT_CAP) and line["text"].endswith(f"of {TEXT_CAP + 500:,} characters]")


def test_sample_refuses_to_overwrite(store, tmp_path, capsys):
    out = tmp_path / "mine.jsonl"
    out.write_text("labelled by hand\n")
    assert main(["label", "--shard", "shard-a", "--sample", "3", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_text() == "labelled by hand\n"
    assert main(["label", "--shard", "shard-a", "--sample", "3", "--out", str(out), "--force"]) == 0
    assert len(read_lines(out)) == 3


def test_unknown_shard_says_to_materialize_extracted_shard(store, tmp_path, capsys):
    assert main(["label", "--shard", "shard-b", "--sample", "3"]) == 2
    err = capsys.readouterr().err
    assert "'shard-b'" in err and "materialize extracted_shard" in err and "shard-a" in err
    assert not (tmp_path / "labels-shard-b-3.jsonl").exists()


def test_unsafe_shard_key_is_refused(store, capsys):
    assert main(["label", "--shard", "../escape", "--sample", "3"]) == 2
    assert "refused" in capsys.readouterr().err


# annotator -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-annotator")
    sp_dir = tmp_path_factory.mktemp("sp")
    trained = train_tokenizer(SENTENCES, TokenizerConfig(vocab_size=VOCAB, num_threads=1), sp_dir)
    export_tokenizer(trained.path, out, vocab_size=VOCAB)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, pad_token_id=0, bos_token_id=2, eos_token_id=3,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def test_annotator_labels_every_line_deterministically(store, tiny_model, tmp_path):
    assert main(["label", "--shard", "shard-a", "--sample", "4", "--out", "sample.jsonl"]) == 0
    for run in ("one", "two"):
        args = ["--model", str(tiny_model), "--out", f"{run}.jsonl", "--max-chars", "500"]
        assert main(["label", "--annotate", "sample.jsonl", *args]) == 0
    one, two = read_lines(tmp_path / "one.jsonl"), read_lines(tmp_path / "two.jsonl")
    assert one == two
    sample = read_lines(tmp_path / "sample.jsonl")
    assert [line["doc_id"] for line in one] == [line["doc_id"] for line in sample]
    for line, before in zip(one, sample):
        assert type(line["label"]) is int and 0 <= line["label"] <= 5
        assert line["confidence"] in ("high", "low")
        assert line["source"].startswith(f"{tiny_model}@") and line["source"] != "human"
        assert line["text"] == before["text"] and line["reason"].startswith("P(score 0-5): ")


def test_annotator_scores_sum_to_one(tiny_model):
    annotator = LMAnnotator.load(str(tiny_model), max_chars=200)
    [(score, probs)] = annotator.score(["A short page about installing a package."])
    assert len(probs) == 6 and abs(sum(probs) - 1) < 1e-5 and probs[score] == max(probs)
    assert annotator.prompt("body").endswith("Score:")


def test_chat_model_is_asked_in_its_chat_template(tmp_path):
    """A byte-level BPE tokenizer with a chat template: the score is read after "Score:" in the assistant's turn."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    bpe.train_from_iterator(SENTENCES, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
    )
    tokenizer.save_pretrained(tmp_path)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    annotator = LMAnnotator.load(str(tmp_path), max_chars=200)
    assert annotator.prompt("body").endswith("</s><s>assistant\nScore:")
    [(score, probs)] = annotator.score(["A short page about installing a package."])
    assert 0 <= score <= 5 and abs(sum(probs) - 1) < 1e-5


def test_missing_model_fails_with_the_reason(store, tmp_path, capsys):
    line = {"doc_id": "d", "text": "t", "label": None, "source": "human"}
    (tmp_path / "sample.jsonl").write_text(json.dumps(line) + "\n")
    missing = tmp_path / "no-such-model"
    assert main(["label", "--annotate", "sample.jsonl", "--model", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "cannot load the annotator model" in err and str(missing) in err
    assert not (tmp_path / "sample.annotated.jsonl").exists()
