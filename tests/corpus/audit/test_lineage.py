import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.audit.lineage import locate, read_sequence, trace
from lm_assets.corpus.tokens.packing import PackingConfig, pack, write_packed
from tests.corpus.tokens.test_packing import doc_tokens, make_shard


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    rng = np.random.default_rng(21)
    shards = [make_shard("s0", 12, rng, max_len=30), make_shard("s1", 8, rng, lang="zh", max_len=60)]
    documents = pl.concat([s.docs.select("doc_id", "source") for s in shards]).with_columns(
        ("https://example.org/" + pl.col("doc_id")).alias("url")
    )
    out = tmp_path_factory.mktemp("packed")
    cfg = PackingConfig(seq_len=24, val_fraction=0.0, mixture={"lang:zh": 2.0}, seed=9, drop_last=False)
    manifest = write_packed(pack(shards, cfg), out)
    return out, shards, documents, manifest


def test_trace_maps_each_sequence_back_to_document_spans(packed):
    out, shards, documents, manifest = packed
    n = manifest["splits"]["train"]["sequences"]
    seen = set()
    for seq_index in range(n):
        rows = trace(out, "train", seq_index, documents)
        assert rows.columns == ["doc_id", "shard", "url", "seq_offset", "length", "doc_token_start"]
        assert rows.height > 0
        seq = read_sequence(out, "train", seq_index)
        for r in rows.iter_rows(named=True):
            want = doc_tokens(shards, r["shard"], r["doc_id"])
            span = want[r["doc_token_start"] : r["doc_token_start"] + r["length"]]
            assert np.array_equal(seq[r["seq_offset"] : r["seq_offset"] + r["length"]], span)
            assert r["url"] == f"https://example.org/{r['doc_id']}"
            seen.add(r["doc_id"])
        assert rows["seq_offset"].is_sorted()
    assert seen == set(documents["doc_id"])  # every document is found in some sequence


def test_trace_accepts_a_callable_a_lazy_frame_or_nothing(packed):
    out, _, documents, _ = packed
    asked = []

    def lookup(ids):
        asked.append(sorted(ids))
        return documents.filter(pl.col("doc_id").is_in(ids))

    eager = trace(out, "train", 0, documents)
    assert trace(out, "train", 0, lookup).equals(eager)
    assert asked and set(asked[0]) == set(eager["doc_id"])
    assert trace(out, "train", 0, documents.lazy()).equals(eager)
    bare = trace(out, "train", 0)
    assert bare["url"].is_null().all() and bare.drop("url").equals(eager.drop("url"))


def test_locate_finds_every_piece_of_a_document(packed):
    out, shards, _, _ = packed
    doc = shards[1].docs.row(0, named=True)  # a zh document: two copies
    pieces = locate(out, doc["doc_id"])
    assert set(pieces["split"]) == {"train"}
    assert sorted(pieces["copy"].unique()) == [0, 1]
    for _, copy in pieces.group_by("copy"):
        assert copy["length"].sum() == doc["length"]
    for r in pieces.iter_rows(named=True):
        seq = read_sequence(out, "train", r["seq_index"])
        span = doc_tokens(shards, "s1", doc["doc_id"])[r["doc_token_start"] : r["doc_token_start"] + r["length"]]
        assert np.array_equal(seq[r["seq_offset"] : r["seq_offset"] + r["length"]], span)
    with pytest.raises(IndexError):
        read_sequence(out, "train", 10_000)
