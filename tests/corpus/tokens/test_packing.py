import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.tokens.packing import (
    PackingConfig,
    ShardTokens,
    best_fit_decreasing,
    pack,
    render_sequence,
    val_mask,
    write_packed,
)

EOS, PAD = 3, 0


def make_shard(
    name,
    n_docs,
    rng,
    *,
    lang="en",
    source=None,
    min_len=1,
    max_len=40,
    dtype=np.uint16,
    vocab=1000,
    gap=2,
    lengths=None,
):
    """A synthetic tokenized shard: random tokens (never EOS/PAD), documents laid out with gaps."""
    lengths = rng.integers(min_len, max_len + 1, n_docs) if lengths is None else np.asarray(lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths + gap)[:-1]]).astype(np.int64)
    tokens = rng.integers(4, vocab, int(offsets[-1] + lengths[-1] + gap) if n_docs else 0).astype(dtype)
    langs = lang if isinstance(lang, list) else [lang] * n_docs
    docs = pl.DataFrame(
        {
            "doc_id": [f"{name}-{i:05d}" for i in range(n_docs)],
            "offset": offsets,
            "length": lengths,
            "source": [source or name] * n_docs,
            "lang": langs,
        }
    )
    sidecar_version = {"token_count": len(tokens), "tokenizer_hash": "tok-1"}
    return ShardTokens(name=name, tokens=tokens, docs=docs, tokenizer_hash="tok-1", version=sidecar_version)


def doc_tokens(shards, shard, doc_id):
    s = next(s for s in shards if s.name == shard)
    row = s.docs.filter(pl.col("doc_id") == doc_id).row(0, named=True)
    return np.asarray(s.tokens[row["offset"] : row["offset"] + row["length"]])


@pytest.fixture
def shards():
    rng = np.random.default_rng(7)
    return [
        make_shard("web", 60, rng, lang="en"),
        make_shard("wiki-zh", 40, rng, lang="zh", max_len=70),
    ]


def check_pieces_match_documents(result, shards, split):
    seqs = result.sequences(split)
    for p in result.segments(split).iter_rows(named=True):
        got = seqs[p["seq_index"], p["seq_offset"] : p["seq_offset"] + p["length"]]
        want = doc_tokens(shards, p["shard"], p["doc_id"])[p["doc_token_start"] : p["doc_token_start"] + p["length"]]
        assert np.array_equal(got, want), p
    return seqs


def test_train_and_val_are_disjoint_by_doc_id(shards):
    cfg = PackingConfig(seq_len=32, val_fraction=0.2, mixture={"lang:zh": 2.0}, seed=5)
    r = pack(shards, cfg)
    train, val = set(r.segments("train")["doc_id"]), set(r.segments("val")["doc_id"])
    assert train and val and not train & val
    all_ids = pl.concat([s.docs["doc_id"] for s in shards])
    expected_val = set(all_ids.filter(pl.Series(val_mask(all_ids, 0.2))))
    assert val <= expected_val and train.isdisjoint(expected_val)
    # up-sampled copies stay in their document's split
    val_segs = r.segments("val")
    assert val_segs.filter(pl.col("copy") == 1)["doc_id"].is_in(list(expected_val)).all()
    # the split depends on doc_id only: another seed and mixture hold out the same documents
    other = pack(shards, PackingConfig(seq_len=16, val_fraction=0.2, seed=99, strategy="bfd"))
    assert set(other.segments("val")["doc_id"]) == expected_val


def test_concat_places_every_document_once_per_copy_in_order(shards):
    L = 32
    cfg = PackingConfig(seq_len=L, val_fraction=0.1, mixture={"lang:zh": 2.0, "source:web": 0.5}, drop_last=False)
    r = pack(shards, cfg)
    docs = r.docs
    for split in ("train", "val"):
        seqs = check_pieces_match_documents(r, shards, split)
        segs = r.segments(split)
        in_split = docs.filter((pl.col("split") == split) & (pl.col("copies") > 0))
        # every copy of every document covers the document exactly once, in order
        covered = segs.group_by("doc_id", "copy").agg(pl.col("length").sum())
        assert covered.height == in_split["copies"].sum()
        per_doc = covered.group_by("doc_id").agg(pl.len().alias("n"), pl.col("length").max())
        joined = in_split.join(per_doc, on="doc_id", how="left")
        assert (joined["n"] == joined["copies"]).all() and (joined["length"] == joined["length_right"]).all()
        for (doc_id, copy), pieces in segs.sort("doc_token_start").group_by("doc_id", "copy", maintain_order=True):
            starts, lens = pieces["doc_token_start"].to_list(), pieces["length"].to_list()
            assert starts == list(np.cumsum([0] + lens[:-1]))
            offs = pieces["seq_offset"].to_list()
            # a document continues at the start of a sequence when the previous one is full
            assert all(o + n == L for o, n in zip(offs[:-1], lens[:-1])) and all(o == 0 for o in offs[1:])
        # everything that is not a document piece is EOS, except the padded tail of one sequence
        mask = np.zeros(seqs.shape, dtype=bool)
        for p in segs.iter_rows(named=True):
            assert not mask[p["seq_index"], p["seq_offset"] : p["seq_offset"] + p["length"]].any()
            mask[p["seq_index"], p["seq_offset"] : p["seq_offset"] + p["length"]] = True
        rest = seqs[~mask]
        units = int(in_split["copies"].sum())
        assert np.count_nonzero(rest == EOS) == units
        pads = np.count_nonzero(rest == PAD)
        assert pads + units == rest.size and pads < L
        # totals add up
        doc_total = int((in_split["length"] * in_split["copies"]).sum())
        stats = r.manifest["splits"][split]
        assert seqs.size == stats["tokens"] == doc_total + units + pads
        assert stats["doc_tokens"] == doc_total and stats["pad_tokens"] == pads
        assert stats["units"] == units
        assert 0 < stats["split_share"] < 1 and stats["truncated_share"] == 0
        # a padded tail sits in exactly one sequence; only a padded last row ends with PAD
        assert sum(1 for row in seqs if row[-1] == PAD) == (1 if pads else 0)


def test_concat_drop_last_drops_only_the_tail(shards):
    L = 32
    r = pack(shards, PackingConfig(seq_len=L, val_fraction=0.0, drop_last=True))
    stats = r.manifest["splits"]["train"]
    total = int(r.docs["length"].sum()) + r.docs.height
    assert stats["sequences"] == total // L
    assert stats["dropped_tail_tokens"] == total % L
    assert stats["pad_tokens"] == 0 and stats["efficiency"] == 1.0
    assert stats["doc_tokens"] + stats["eos_tokens"] == stats["tokens"]
    # the document(s) cut by the dropped tail count as truncated
    assert stats["truncated_units"] == int((r.docs["placed_tokens"] < r.docs["length"]).sum())
    assert 1 <= stats["truncated_units"] <= 2
    check_pieces_match_documents(r, shards, "train")


def test_best_fit_decreasing_picks_the_tightest_bin():
    bins, offsets, n = best_fit_decreasing(np.array([7, 5, 3, 3, 2]), 10)
    # 7 -> bin0 (room 3); 5 -> bin1 (room 5); 3 -> bin0, the tighter fit (room 0); 3 -> bin1 (room 2); 2 -> bin1
    assert n == 2
    assert bins.tolist() == [0, 1, 0, 1, 1]
    assert offsets.tolist() == [0, 0, 7, 5, 8]
    # on random items, replaying the placements: every item went to an open bin with the least room that fits
    rng = np.random.default_rng(0)
    for cap in (16, 100):
        sizes = np.sort(rng.integers(1, cap + 1, 400))[::-1]
        bins, offsets, n = best_fit_decreasing(sizes, cap)
        room = []
        for size, b, off in zip(sizes.tolist(), bins.tolist(), offsets.tolist()):
            fits = [r for r in room if r >= size]
            if b == len(room):
                assert not fits and off == 0
                room.append(cap - size)
            else:
                assert room[b] == min(fits) and off == cap - room[b]
                room[b] -= size
        assert n == len(room) and min(room) >= 0


def test_bfd_fits_sequences_counts_truncation_and_efficiency():
    rng = np.random.default_rng(3)
    L = 48
    shards = [
        make_shard("a", 80, rng, max_len=30),
        make_shard("b", 20, rng, min_len=40, max_len=130),
        make_shard("edge", 4, rng, lengths=[L - 1, L, L + 1, 2 * L - 1]),  # fits exactly; the rest is cut
    ]
    r = pack(shards, PackingConfig(seq_len=L, strategy="bfd", val_fraction=0.0))
    seqs = check_pieces_match_documents(r, shards, "train")
    segs = r.segments("train")
    # pieces never overlap and never run past the sequence end
    assert (segs["seq_offset"] + segs["length"] <= L).all()
    used = np.zeros(seqs.shape, dtype=bool)
    for p in segs.iter_rows(named=True):
        assert not used[p["seq_index"], p["seq_offset"] : p["seq_offset"] + p["length"]].any()
        used[p["seq_index"], p["seq_offset"] : p["seq_offset"] + p["length"]] = True
    n_eos = int(np.count_nonzero(seqs[~used] == EOS))
    n_pad = int(np.count_nonzero(seqs[~used] == PAD))
    assert n_eos + n_pad == np.count_nonzero(~used)
    assert n_eos == r.docs.height  # every document ends with one EOS
    stats = r.manifest["splits"]["train"]
    assert stats["efficiency"] == pytest.approx((seqs.size - n_pad) / seqs.size)
    assert r.manifest["efficiency"] == pytest.approx(stats["efficiency"])
    assert stats["pad_tokens"] == n_pad
    # documents whose tokens + EOS exceed seq_len are cut, and counted as truncated
    long_docs = r.docs.filter(pl.col("length") + 1 > L)
    assert stats["truncated_units"] == long_docs.height > 0
    assert stats["truncated_share"] == pytest.approx(long_docs.height / r.docs.height)
    # a document that fits is kept whole in one sequence
    short = set(r.docs.filter(pl.col("length") + 1 <= L)["doc_id"])
    per_doc = segs.group_by("doc_id").agg(pl.len().alias("pieces"))
    assert per_doc.filter(pl.col("doc_id").is_in(list(short)))["pieces"].max() == 1
    # a long document's full pieces each fill a sequence
    full = segs.filter(pl.col("doc_id").is_in(long_docs["doc_id"].to_list()) & (pl.col("length") == L))
    assert (full["seq_offset"] == 0).all() and full.height > 0
    # best fit decreasing packs tightly here: at most one bin's worth of slack over the lower bound
    assert stats["sequences"] <= -(-(seqs.size - n_pad) // L) + 1


def test_shuffle_is_deterministic_and_seeded(shards, tmp_path):
    def files(seed, shard_list, name):
        out = tmp_path / name
        write_packed(pack(shard_list, PackingConfig(seq_len=32, val_fraction=0.1, seed=seed)), out)
        return {p.name: p.read_bytes() for p in sorted(out.iterdir())}

    a = files(1, shards, "a")
    assert set(a) == {
        "manifest.json",
        "train.bin",
        "val.bin",
        "train_segments.parquet",
        "val_segments.parquet",
    }  # and no temporary files left behind
    assert files(1, shards, "b") == a
    assert files(1, shards[::-1], "c")["train.bin"] == a["train.bin"]  # independent of shard order
    d = files(2, shards, "d")
    assert len(d["train.bin"]) == len(a["train.bin"]) and d["train.bin"] != a["train.bin"]
    assert d["train_segments.parquet"] != a["train_segments.parquet"]


def test_sequence_shuffle_permutes_rows(shards):
    # bfd rows do not depend on the seed except through the document order and the row shuffle
    r1 = pack(shards, PackingConfig(seq_len=128, strategy="bfd", val_fraction=0.0, seed=1))
    s1 = r1.sequences("train")
    assert len(s1) > 4
    # shuffle: consecutive rows are not in packing order (bins are filled largest item first)
    first_piece = r1.segments("train").group_by("seq_index").agg(pl.col("length").first()).sort("seq_index")
    assert first_piece["length"].to_list() != sorted(first_piece["length"].to_list(), reverse=True)


def test_mixture_realized_shares_match_requested():
    rng = np.random.default_rng(11)
    n = 1500
    shards = [
        make_shard("clean", n, rng, lang=list(rng.choice(["en", "zh"], n, p=[0.7, 0.3])), max_len=60),
        make_shard("noisy", n, rng, lang=list(rng.choice(["en", "zh"], n, p=[0.7, 0.3])), max_len=60),
    ]
    mixture = {"lang:zh": 2.0, "source:noisy": 0.5}
    r = pack(shards, PackingConfig(seq_len=64, val_fraction=0.02, mixture=mixture, seed=4, drop_last=False))
    docs = r.docs
    # weights multiply: clean zh x2, noisy zh x1, noisy en kept with probability 1/2
    copies = docs.group_by("source", "lang").agg(pl.col("copies").min().alias("lo"), pl.col("copies").max().alias("hi"))
    got = {(row["source"], row["lang"]): (row["lo"], row["hi"]) for row in copies.iter_rows(named=True)}
    assert got[("clean", "zh")] == (2, 2) and got[("clean", "en")] == (1, 1)
    assert got[("noisy", "zh")] == (1, 1) and got[("noisy", "en")] == (0, 1)
    kept = docs.filter((pl.col("source") == "noisy") & (pl.col("lang") == "en"))["copies"].mean()
    assert 0.45 < kept < 0.55

    m = r.manifest["mixture"]
    assert m["requested"] == mixture and m["unmatched_keys"] == []
    for table in ("by_source", "by_lang"):
        for entry in m[table].values():
            assert abs(entry["realized_share"] - entry["requested_share"]) < 0.02
    assert m["by_lang"]["zh"]["weight"] == 2.0 and m["by_source"]["noisy"]["weight"] == 0.5
    assert m["by_lang"]["zh"]["realized_share"] > m["by_lang"]["zh"]["natural_share"] + 0.1
    # the manifest's realized counts are the tokens actually in the packed files
    segs = pl.concat([r.segments("train"), r.segments("val")])
    by_shard = segs.group_by("shard").agg(pl.col("length").sum())
    for row in by_shard.iter_rows(named=True):
        assert m["by_source"][row["shard"]]["realized_tokens"] == row["length"]
    json.dumps(r.manifest)  # serializable


@pytest.mark.parametrize("dtype,vocab", [(np.uint16, 60000), (np.uint32, 150000)])
def test_dtype_preserved_and_little_endian_on_disk(tmp_path, dtype, vocab):
    rng = np.random.default_rng(2)
    shard = make_shard("s", 30, rng, dtype=dtype, vocab=vocab)
    r = pack([shard], PackingConfig(seq_len=16, val_fraction=0.0))
    m = write_packed(r, tmp_path)
    assert m["dtype"] == np.dtype(dtype).name and m["byte_order"] == "little"
    raw = (tmp_path / "train.bin").read_bytes()
    n = m["splits"]["train"]["sequences"]
    assert len(raw) == n * 16 * np.dtype(dtype).itemsize
    on_disk = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(n, 16)
    assert np.array_equal(on_disk, r.sequences("train"))
    if dtype is np.uint32:
        assert on_disk.max() >= 1 << 16  # ids above uint16 survive
    # a big-endian input array gives the same (little-endian) output
    be = ShardTokens("s", shard.tokens.astype(np.dtype(dtype).newbyteorder(">")), shard.docs, "tok-1")
    assert np.array_equal(pack([be], PackingConfig(seq_len=16, val_fraction=0.0)).sequences("train"), on_disk)


def test_from_files_memory_maps_a_tokenized_shard(tmp_path, shards):
    s = shards[0]
    path = tmp_path / "tokens.bin"
    path.write_bytes(np.asarray(s.tokens, dtype="<u2").tobytes())
    sidecar = {
        "dtype": "uint16",
        "token_count": len(s.tokens),
        "documents": s.docs.height,
        "tokenizer_hash": "tok-1",
        "vocab_size": 1000,
    }
    index = s.docs.select("doc_id", "offset", "length")
    meta = s.docs.select("doc_id", "source", "lang")
    loaded = ShardTokens.from_files("web", path, index, sidecar, documents=meta)
    assert isinstance(loaded.tokens, np.memmap) and loaded.version["vocab_size"] == 1000
    cfg = PackingConfig(seq_len=32, val_fraction=0.1)
    assert np.array_equal(pack([loaded], cfg).sequences("train"), pack([s], cfg).sequences("train"))
    with pytest.raises(ValueError, match="bytes"):
        ShardTokens.from_files("web", path, index, {**sidecar, "token_count": len(s.tokens) + 1})


def test_manifest_records_inputs_and_settings(shards, tmp_path):
    cfg = PackingConfig(seq_len=32, val_fraction=0.1, seed=3, mixture={"lang:zh": 2.0, "source:nowhere": 3.0})
    m = write_packed(pack(shards, cfg), tmp_path)
    assert m == json.loads((tmp_path / "manifest.json").read_text())
    assert m["tokenizer_hash"] == "tok-1" and m["seq_len"] == 32 and m["strategy"] == "concat" and m["seed"] == 3
    assert [i["shard"] for i in m["inputs"]] == ["web", "wiki-zh"]
    assert m["inputs"][0]["version"] == {"token_count": len(shards[0].tokens), "tokenizer_hash": "tok-1"}
    assert m["mixture"]["unmatched_keys"] == ["source:nowhere"]
    assert m["files"]["train"]["shape"] == [m["splits"]["train"]["sequences"], 32]
    assert m["documents"]["input"] == 100


def test_invalid_inputs_are_rejected(shards):
    with pytest.raises(ValueError, match="mixture key"):
        PackingConfig(mixture={"domain:x": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        PackingConfig(mixture={"lang:en": -1})
    with pytest.raises(ValueError, match="strategy"):
        PackingConfig(strategy="greedy")
    other = ShardTokens("x", shards[0].tokens, shards[0].docs, tokenizer_hash="tok-2")
    with pytest.raises(ValueError, match="different tokenizers"):
        pack([shards[1], other])
    with pytest.raises(ValueError, match="more than once"):
        pack([shards[0], ShardTokens("copy", shards[0].tokens, shards[0].docs)])
    bad = ShardTokens("bad", shards[0].tokens[:10], shards[0].docs)
    with pytest.raises(ValueError, match="outside"):
        pack([bad])


def test_empty_documents_and_empty_splits(tmp_path):
    docs = pl.DataFrame({"doc_id": ["a", "b"], "offset": [0, 3], "length": [3, 0]})
    shard = ShardTokens("s", np.array([5, 6, 7], dtype=np.uint16), docs)
    r = pack([shard], PackingConfig(seq_len=4, val_fraction=0.0))
    assert r.manifest["documents"]["empty_skipped"] == 1
    assert r.sequences("train").tolist() == [[5, 6, 7, EOS]]
    m = write_packed(r, tmp_path)
    assert m["splits"]["val"]["sequences"] == 0 and (tmp_path / "val.bin").stat().st_size == 0
    assert pl.read_parquet(Path(tmp_path) / "val_segments.parquet").height == 0


def test_a_rendered_sequence_marks_every_document_piece_and_what_lies_between():
    rng = np.random.default_rng(3)
    shards = [make_shard("a", 12, rng, max_len=30)]
    for strategy in ("concat", "bfd"):
        result = pack(shards, PackingConfig(seq_len=64, strategy=strategy, val_fraction=0.0, eos_id=EOS, pad_id=PAD))
        tokens = result.sequences("train", 0, 1)[0]
        pieces = result.segments("train").filter(pl.col("seq_index") == 0).sort("seq_offset")
        text = render_sequence(tokens, pieces, lambda ids: " ".join(map(str, ids)), EOS, PAD)
        lines = text.split("\n")
        # Each piece: its marker, then exactly its tokens, which are the document's own.
        for piece in pieces.iter_rows(named=True):
            first = piece["doc_token_start"]
            at = lines.index(f"⟦document {piece['doc_id']}, its tokens {first}–{first + piece['length']}⟧")
            own = doc_tokens(shards, "a", piece["doc_id"])[first:first + piece["length"]]
            assert lines[at + 1] == " ".join(map(str, own))
        gaps = [line for line in lines if line.startswith("⟦") and not line.startswith("⟦document")]
        assert all("EOS" in g or "PAD" in g for g in gaps) and "other tokens" not in text
        if strategy == "bfd":
            assert any("PAD" in g for g in gaps)


def test_an_index_tiles_its_token_file_or_not():
    from lm_assets.corpus.tokens.tokenize import document_index, index_tiles_tokens

    index = document_index(["a", "b", "c"], np.array([3, 0, 2]))
    assert index_tiles_tokens(index, documents=3, token_count=5)
    assert not index_tiles_tokens(index, documents=4, token_count=5)
    assert not index_tiles_tokens(index, documents=3, token_count=6)
    gap = index.with_columns(pl.Series("offset", [0, 4, 4]))
    assert not index_tiles_tokens(gap, documents=3, token_count=5)
    assert index_tiles_tokens(index.head(0), documents=0, token_count=0)


def test_a_curriculum_scores_each_sequence_and_training_starts_easy_to_hard(tmp_path):
    """Scored by the quality of their documents: the packer writes each train sequence's difficulty, and
    the trainer's first epoch takes a seeded quarter of the sequences easiest first, then the rest
    shuffled, each once; the order is fixed by the seed, and with no curriculum nothing changes."""
    from lm_assets.training.data import PackedDataset, batch_indices

    rng = np.random.default_rng(3)
    shard = make_shard("web", 400, rng, min_len=5, max_len=30)
    shard = ShardTokens(shard.name, shard.tokens, shard.docs.with_columns(
        pl.Series("quality_score", rng.random(400))), shard.tokenizer_hash, shard.version)
    cfg = PackingConfig(seq_len=64, strategy="bfd", val_fraction=0.0, curriculum="quality", curriculum_fraction=0.25)
    result = pack([shard], cfg)
    manifest = write_packed(result, tmp_path / "scored")
    assert manifest["curriculum"]["score"] == "quality" and manifest["files"]["train"]["difficulty"] == "train_difficulty.bin"
    difficulty = np.fromfile(tmp_path / "scored" / "train_difficulty.bin", dtype="<f4")
    segments = result.segments("train").join(shard.docs.select("doc_id", "quality_score"), on="doc_id")
    expected = segments.group_by("seq_index").agg(
        (1 - (pl.col("quality_score") * pl.col("length")).sum() / pl.col("length").sum()).alias("d")).sort("seq_index")
    assert np.allclose(difficulty, expected["d"].to_numpy(), atol=1e-6)

    dataset = PackedDataset(tmp_path / "scored", "train", seed=5)
    n, head = len(dataset), round(0.25 * len(dataset))
    order = np.concatenate([dataset.batch_indices(step, 0, 1, 1) for step in range(n)])
    assert sorted(order.tolist()) == list(range(n))  # every sequence once in the first epoch
    assert np.all(np.diff(difficulty[order[:head]]) >= 0)  # the curriculum's share: easiest first
    assert difficulty[order[:head]].mean() < difficulty[order[head:]].mean()
    again = PackedDataset(tmp_path / "scored", "train", seed=5)
    assert np.array_equal(order, np.concatenate([again.batch_indices(s, 0, 1, 1) for s in range(n)]))  # resume is exact
    other = PackedDataset(tmp_path / "scored", "train", seed=6)
    assert not np.array_equal(order[:head], np.concatenate([other.batch_indices(s, 0, 1, 1) for s in range(head)]))
    assert np.array_equal(dataset.batch_indices(n + 3, 0, 1, 1), batch_indices(n, 5, n + 3, 0, 1, 1))  # epoch 1: plain

    from lm_assets.defs.tokens.assets import curriculum_view

    shown = curriculum_view(tmp_path / "scored").value  # packed_dataset's metadata: difficulty by position
    assert shown.count("| true ") + shown.count("| True ") >= 2 and "mean_difficulty" in shown

    plain = write_packed(pack([shard], PackingConfig(seq_len=64, strategy="bfd", val_fraction=0.0)), tmp_path / "plain")
    assert "curriculum" not in plain and not (tmp_path / "plain" / "train_difficulty.bin").exists()
    assert PackedDataset(tmp_path / "plain", "train", seed=5).first_epoch is None
