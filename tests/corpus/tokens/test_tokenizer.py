"""Tokenizer training and use, and tokenized shards, on the shipped sample crawl (English and Chinese)."""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.curation.extract import extract_documents
from lm_assets.corpus.ingest.readers import read_shard
from lm_assets.corpus.tokens.tokenize import (
    index_path,
    is_stale,
    read_index,
    read_sidecar,
    read_tokenized_shard,
    sidecar_path,
    token_dtype,
    tokenize_documents,
    tokenize_shard,
    write_sidecar,
    write_tokenized_shard,
)
from lm_assets.corpus.tokens.tokenizer import (
    TokenizerConfig,
    VocabSizeError,
    byte_fallback_share,
    fertility,
    load_tokenizer,
    roundtrip_failures,
    sample_documents,
    tokenizer_hash,
    tokenizer_report,
    train_tokenizer,
    unk_count,
)

CRAWL = Path(__file__).resolve().parents[3] / "data" / "sample-crawl"
VOCAB = 4000

SAMPLES = [
    "Hello, world!\nThe year 2026 has 365 days.\n\nTwo blank lines above; trailing spaces   ",
    "   leading spaces, \ttabs\tand  double  spaces",
    "def f(x):\n    return x ** 2  # indentation\n",
    "我们今天去公园散步。\n天气很好，阳光明媚。",
    "北京是中华人民共和国的首都，人口约2189万。",
    "Emoji 😀🎉 and rare CJK 𠀀𪚥 龘 (byte fallback)",
    "Mixed 中英文 text with numbers 3.14159 and ＡＢＣ full-width",
    "\n\nstarts with newlines and ends with one\n",
    "",
    " ",
    "\n",
]


@pytest.fixture(scope="module")
def crawl_frames() -> list[pl.DataFrame]:
    frames = []
    for path in sorted(CRAWL.glob("*.warc.gz")):
        frames.append(extract_documents(read_shard(path).documents).kept)
    return frames


@pytest.fixture(scope="module")
def crawl_docs(crawl_frames) -> pl.DataFrame:
    docs = pl.concat(crawl_frames, how="diagonal")
    return docs.with_columns(pl.col("lang_hint").str.split("-").list.first().alias("lang"))


@pytest.fixture(scope="module")
def cfg() -> TokenizerConfig:
    return TokenizerConfig(vocab_size=VOCAB, sample_docs=300, sample_seed=7, num_threads=2)


@pytest.fixture(scope="module")
def sample(crawl_frames, cfg) -> list[str]:
    return sample_documents(crawl_frames, cfg)


@pytest.fixture(scope="module")
def trained(sample, cfg, tmp_path_factory):
    return train_tokenizer(sample, cfg, tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def sp(trained):
    return load_tokenizer(trained.path)


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def test_sample_is_seeded_and_proportional_across_shards(crawl_frames, cfg, sample):
    assert len(sample) == 300
    assert sample == sample_documents(crawl_frames, cfg)
    other = sample_documents(crawl_frames, TokenizerConfig(sample_docs=300, sample_seed=8))
    assert other != sample and len(other) == 300
    # Three shards of 125 documents: 100 from each, in shard order.
    tagged = [f.select((pl.lit(f"{i}/") + pl.col("doc_id")).alias("text")) for i, f in enumerate(crawl_frames)]
    picked = sample_documents(tagged, cfg)
    assert [t.split("/")[0] for t in picked] == ["0"] * 100 + ["1"] * 100 + ["2"] * 100
    assert len(set(picked)) == 300


def test_sample_quotas_add_up_and_small_inputs_are_taken_whole():
    shards = [[f"a{i}" for i in range(10)], [f"b{i}" for i in range(20)], [f"c{i}" for i in range(70)]]
    picked = sample_documents(shards, TokenizerConfig(sample_docs=10))
    assert [sum(t[0] == s for t in picked) for s in "abc"] == [1, 2, 7]
    assert sample_documents(shards, TokenizerConfig(sample_docs=1000)) == [t for s in shards for t in s]
    # A single list of texts (or frame) is one shard; empty and null texts are never drawn.
    assert sample_documents(["x", None, "", "y"], TokenizerConfig(sample_docs=5)) == ["x", "y"]
    assert sample_documents(pl.DataFrame({"text": ["p", "q"]}), TokenizerConfig()) == ["p", "q"]


# ---------------------------------------------------------------------------------------------
# The trained model
# ---------------------------------------------------------------------------------------------


def test_vocab_special_ids_and_hash(trained, sp):
    assert trained.vocab_size == sp.get_piece_size() == VOCAB
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert sp.id_to_piece(4) == "\n"
    assert sp.is_byte(5) and sp.id_to_piece(5) == "<0x00>"
    data = trained.path.read_bytes()
    assert data == trained.model
    assert trained.hash == tokenizer_hash(trained.path) == tokenizer_hash(data) == hashlib.sha256(data).hexdigest()
    assert trained.metadata()["tokenizer_hash"] == trained.hash
    assert not list(trained.path.parent.glob("*.tmp"))


def test_training_is_reproducible_whatever_the_thread_count(sample, cfg, trained, tmp_path):
    again = train_tokenizer(sample, TokenizerConfig(**{**cfg.__dict__, "num_threads": 1}), tmp_path)
    assert again.hash == trained.hash
    assert again.model == trained.model


def test_exact_roundtrip(sp, crawl_docs):
    assert roundtrip_failures(sp, SAMPLES) == []
    for text in SAMPLES:
        assert sp.decode(sp.encode(text)) == text
    assert roundtrip_failures(sp, crawl_docs["text"].to_list(), num_threads=2) == []


def test_newline_is_one_token_of_its_own(sp):
    ids = sp.encode("first line\n\nsecond line\n")
    assert ids.count(4) == 3
    assert all("\n" not in sp.id_to_piece(i) for i in ids if i != 4)


def test_digits_are_split(sp):
    ids = sp.encode("2026")
    assert [sp.id_to_piece(i) for i in ids] == ["2", "0", "2", "6"]
    pieces = [sp.id_to_piece(i) for i in sp.encode("in 1999 and 31415")]
    assert all(len(p.strip("▁")) == 1 for p in pieces if any(c.isdigit() for c in p))


def test_rare_characters_use_byte_fallback_never_unk(sp, crawl_docs):
    for text in ("😀", "𠀀", "𪚥"):
        ids = sp.encode(text)
        assert len(ids) == len(text.encode())
        assert all(sp.is_byte(i) for i in ids)
        assert sp.decode(ids) == text
    assert unk_count(sp, SAMPLES) == 0
    assert unk_count(sp, crawl_docs["text"].to_list(), num_threads=2) == 0
    assert byte_fallback_share(sp, ["😀🎉"]) == 1.0
    assert byte_fallback_share(sp, ["the cat"]) == 0.0
    assert 0.0 < byte_fallback_share(sp, crawl_docs["text"].to_list(), num_threads=2) < 0.02


def test_marker_character_is_the_documented_roundtrip_exception(sp):
    # U+2581 is SentencePiece's space marker: it decodes to a space.
    failures = roundtrip_failures(sp, ["fine", "bad ▁ marker", "fine too"])
    assert failures == [(1, 4)]


def test_fertility_and_report(sp, crawl_docs):
    texts, langs = crawl_docs["text"].to_list(), crawl_docs["lang"].to_list()
    fert = fertility(sp, texts, langs, num_threads=2)
    assert set(fert) == {"en", "zh"}
    assert 1.0 < fert["en"] < 4.0  # tokens per whitespace word
    assert 0.5 < fert["zh"] < 2.0  # tokens per CJK character
    assert fertility(sp, ["我们今天去公园散步"], ["zh"])["zh"] == pytest.approx(len(sp.encode("我们今天去公园散步")) / 9)
    report = tokenizer_report(sp, texts, langs, num_threads=2)
    assert report["unk_count"] == 0 and report["roundtrip_failures"] == 0 and report["vocab_size"] == VOCAB


def test_vocab_too_high_for_the_sample_says_how_many_it_supports(crawl_frames, tmp_path):
    few = crawl_frames[0]["text"].to_list()[:3]
    with pytest.raises(VocabSizeError, match=r"yield at most (\d+) pieces") as err:
        train_tokenizer(few, TokenizerConfig(vocab_size=32_000), tmp_path)
    supported = int(err.value.args[0].split("at most ")[1].split(" ")[0])
    assert train_tokenizer(few, TokenizerConfig(vocab_size=supported), tmp_path).vocab_size == supported
    soft = train_tokenizer(few, TokenizerConfig(vocab_size=32_000, hard_vocab_limit=False), tmp_path)
    assert soft.vocab_size == supported


def test_vocab_too_small_and_no_text(sample, tmp_path):
    with pytest.raises(VocabSizeError, match="too small"):
        train_tokenizer(sample, TokenizerConfig(vocab_size=600), tmp_path)
    with pytest.raises(ValueError, match="no training text"):
        train_tokenizer(["", None], TokenizerConfig(vocab_size=600), tmp_path)


# ---------------------------------------------------------------------------------------------
# Tokenized shards
# ---------------------------------------------------------------------------------------------


def test_token_dtype_boundaries():
    assert token_dtype(VOCAB) == np.dtype("<u2")
    assert token_dtype(32_000) == np.dtype("<u2")
    assert token_dtype(65_535) == np.dtype("<u2")
    assert token_dtype(65_536) == np.dtype("<u4")
    assert token_dtype(128_256) == np.dtype("<u4")
    assert token_dtype(VOCAB).str == "<u2" and token_dtype(65_536).str == "<u4"


def test_tokenize_documents_matches_per_document_encoding(sp, crawl_docs):
    texts = crawl_docs["text"].to_list()[:60] + [None, ""]
    tokens, lengths = tokenize_documents(texts, sp, num_threads=2)
    assert tokens.dtype.str == "<u2"
    expected = [sp.encode(t or "") for t in texts]
    assert lengths.tolist() == [len(e) for e in expected]
    assert tokens.tolist() == [i for e in expected for i in e]
    assert lengths[-2:].tolist() == [0, 0]
    assert not np.isin(tokens, [sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id()]).any()
    # Batching and thread count change nothing.
    small_batches, small_lengths = tokenize_documents(texts, sp, num_threads=1, batch_chars=5_000)
    assert np.array_equal(small_batches, tokens) and np.array_equal(small_lengths, lengths)


def test_write_and_read_tokenized_shard(sp, trained, crawl_docs, tmp_path):
    docs = crawl_docs.select("doc_id", "text").head(40)
    path = tmp_path / "shard-00000.tokens"
    written = write_tokenized_shard(path, docs, sp, trained.hash, num_threads=2)

    sidecar = read_sidecar(path)
    assert sidecar == written.sidecar == json.loads(sidecar_path(path).read_text())
    assert sidecar["dtype"] == "uint16" and sidecar["vocab_size"] == VOCAB
    assert sidecar["tokenizer_hash"] == trained.hash and sidecar["documents"] == 40

    tokens = read_tokenized_shard(path)
    assert isinstance(tokens, np.memmap) and tokens.dtype.str == "<u2"
    assert len(tokens) == sidecar["token_count"]
    raw = path.read_bytes()
    assert len(raw) == 2 * sidecar["token_count"]
    # Little-endian on disk, whatever the machine: low byte first.
    first = sp.encode(docs["text"][0])[0]
    assert raw[:2] == int(first).to_bytes(2, "little")
    assert np.array_equal(np.frombuffer(raw, dtype="<u2"), tokens)

    index = read_index(path)
    assert index.equals(written.index) and index.columns == ["doc_id", "offset", "length"]
    assert index["doc_id"].to_list() == docs["doc_id"].to_list()
    offsets, lengths = index["offset"].to_numpy(), index["length"].to_numpy()
    assert offsets[0] == 0 and np.array_equal(offsets[1:], np.cumsum(lengths)[:-1])
    assert offsets[-1] + lengths[-1] == len(tokens)
    for doc_id, offset, length in index.iter_rows():
        text = docs.filter(pl.col("doc_id") == doc_id)["text"][0]
        assert sp.decode(tokens[offset : offset + length].tolist()) == text

    in_memory = tokenize_shard(docs, sp, trained.hash, num_threads=1)
    assert in_memory.to_bytes() == raw and in_memory.index.equals(index) and in_memory.sidecar == sidecar
    assert written.to_bytes() == raw
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, sidecar_path(path).name, index_path(path).name]
    )


def test_uint32_shard_is_read_with_the_sidecar_dtype(tmp_path):
    path = tmp_path / "big-vocab.tokens"
    ids = np.array([1, 70_000, 128_000, 5], dtype="<u4")
    path.write_bytes(ids.tobytes())
    write_sidecar(
        sidecar_path(path),
        {"format_version": 1, "dtype": "uint32", "byte_order": "little", "token_count": 4, "documents": 1,
         "tokenizer_hash": "x", "vocab_size": 128_256},
    )
    tokens = read_tokenized_shard(path)
    assert tokens.dtype.str == "<u4" and tokens.tolist() == ids.tolist()
    assert path.read_bytes()[4:8] == (70_000).to_bytes(4, "little")


def test_truncated_shard_is_refused(sp, trained, crawl_docs, tmp_path):
    path = tmp_path / "s.tokens"
    write_tokenized_shard(path, crawl_docs.select("doc_id", "text").head(3), sp, trained.hash)
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ValueError, match="sidecar promises"):
        read_tokenized_shard(path)


def test_empty_shard(sp, trained, tmp_path):
    path = tmp_path / "empty.tokens"
    written = write_tokenized_shard(path, pl.DataFrame({"doc_id": ["a"], "text": [""]}), sp, trained.hash)
    assert written.sidecar["token_count"] == 0 and written.index["length"].to_list() == [0]
    assert len(read_tokenized_shard(path)) == 0


def test_stale_detection(sp, trained, crawl_docs, tmp_path):
    path = tmp_path / "s.tokens"
    written = write_tokenized_shard(path, crawl_docs.select("doc_id", "text").head(2), sp, trained.hash)
    assert not is_stale(written.sidecar, trained.hash)
    assert is_stale(written.sidecar, "0" * 64)
    assert is_stale(None, trained.hash)
    assert is_stale({**written.sidecar, "format_version": 0}, trained.hash)


# -- a checkpoint's tokenizer, adopted and extended ------------------------------------------------


def test_pieces_are_appended_after_the_last_id_and_keep_every_existing_id():
    from lm_assets.corpus.tokens.tokenizer import add_pieces
    from tests.support.tiny_llama import llama_style_tokenizer

    base = llama_style_tokenizer()
    old = load_tokenizer(base)
    n = old.get_piece_size()
    assert "磨坊" in {old.id_to_piece(i) for i in range(n)}
    model, added, present = add_pieces(base, ["Kubernetes", "磨坊", "deepspeed", "Kubernetes"])
    assert added == ["Kubernetes", "deepspeed"] and present == ["磨坊", "Kubernetes"]  # a repeat is not added twice
    sp = load_tokenizer(model)
    assert sp.get_piece_size() == n + 2
    assert [sp.id_to_piece(i) for i in range(n)] == [old.id_to_piece(i) for i in range(n)]
    ids = sp.encode("deploy Kubernetes with deepspeed by the 老磨坊")
    assert n in ids and n + 1 in ids  # each added piece is one token of its own
    assert sp.decode(ids) == "deploy Kubernetes with deepspeed by the 老磨坊"
    for bad in ("two words", "", "tab\tbed", "▁lead"):
        with pytest.raises(ValueError, match="whitespace"):
            add_pieces(base, [bad])


def test_adopting_takes_the_checkpoints_sentencepiece_model_and_its_special_ids(tmp_path):
    from lm_assets.corpus.tokens.tokenizer import adopt_tokenizer, special_ids
    from tests.support.tiny_llama import llama_style_tokenizer

    base = llama_style_tokenizer()
    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(base)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": load_tokenizer(base).get_piece_size()}))
    adopted = adopt_tokenizer(folder, ["Kubernetes"])
    assert adopted.base_hash == hashlib.sha256(base).hexdigest() != adopted.hash
    assert adopted.vocab_size == load_tokenizer(base).get_piece_size() + 1
    # Llama's tokenizer has no pad piece: padding takes unk (0), which byte fallback never emits.
    assert special_ids(adopted.processor()) == {"bos": 1, "eos": 2, "pad": 0, "unk": 0}
    assert adopted.metadata()["added_pieces"] == ["Kubernetes"]
    assert adopt_tokenizer(folder, ["Kubernetes"]).model == adopted.model  # deterministic

    (folder / "tokenizer.model").unlink()
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="only tokenizer.json"):
        adopt_tokenizer(folder)
    (folder / "tokenizer.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        adopt_tokenizer(folder)
    (folder / "tokenizer.model").write_bytes(base)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 10}))
    with pytest.raises(ValueError, match="the model only 10"):
        adopt_tokenizer(folder)


def test_adopting_refuses_a_hostile_config_json_naming_it(tmp_path):
    from lm_assets.corpus.tokens.tokenizer import adopt_tokenizer
    from tests.support.tiny_llama import llama_style_tokenizer

    folder = tmp_path / "llama"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(llama_style_tokenizer())
    config = folder / "config.json"
    for hostile, refusal in (({"vocab_size": "32000"}, "vocab_size must be an integer"),
                             ([{"vocab_size": 32000}], "holds a JSON list, not an object"),
                             ({"vocab_size": 10**12}, "vocab_size must be an integer from 1 to"),
                             ({"vocab_size": 400, "rope_scaling": "linear"}, "rope_scaling must be an object")):  # fmt: skip
        config.write_text(json.dumps(hostile))
        with pytest.raises(ValueError, match=re.escape(str(config)) + ".*" + refusal):
            adopt_tokenizer(folder)
