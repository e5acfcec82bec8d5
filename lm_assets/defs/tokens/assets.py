"""From decontaminated text to what the trainer reads: the tokenizer, tokenized shards, packed sequences."""

import contextlib
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field, model_validator

from lm_assets.corpus.tokens.packing import (
    CURRICULA,
    STRATEGIES,
    PackedResult,
    PackingConfig,
    ShardTokens,
    pack,
    render_sequence,
    write_packed,
)
from lm_assets.corpus.tokens.tokenize import index_tiles_tokens, is_stale, tokenize_shard
from lm_assets.corpus.tokens.tokenizer import (
    AdoptedTokenizer,
    TokenizerConfig,
    TrainedTokenizer,
    VocabSizeError,
    adopt_tokenizer,
    load_tokenizer,
    sample_documents,
    special_ids,
    tokenizer_report,
    train_tokenizer,
)
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices, to_dataclass
from lm_assets.defs.common.environment import fill_from_environment, unset_means
from lm_assets.defs.common.partitions import shard_asset, shards_with
from lm_assets.defs.common.reporting import (
    fenced,
    markdown_table,
    shard_check_spec,
)
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.sample_defaults import defaults_note, launchpad_default
from lm_assets.defs.common.stages import each_shard
from lm_assets.storage.layout import (
    PACKED_MANIFEST,
    TOKENIZER_KEYS,
    packed_key,
    stage_folder,
    stage_keys,
    tokenized_keys,
)

CHECK_SAMPLE_DOCS = 200


# tokenizer ----------------------------------------------------------------------------------------
TOKENIZER_DEFAULTS = TokenizerConfig()


class TokenizerTrainingConfig(dg.Config):
    vocab_size: int | None = Field(
        default=None,
        description="pieces in the vocabulary; "
        + unset_means("LM_ASSETS_VOCAB_SIZE", launchpad_default("tokenizer", "vocab_size", TOKENIZER_DEFAULTS.vocab_size))
        + defaults_note("tokenizer"),
    )
    sample_docs: int = Field(
        default=TOKENIZER_DEFAULTS.sample_docs,
        description="at most this many documents, drawn across shards, to train on",
    )
    sample_seed: int = Field(default=TOKENIZER_DEFAULTS.sample_seed, description="seed of the document sample")
    character_coverage: float = Field(
        default=TOKENIZER_DEFAULTS.character_coverage,
        description="share (0-1] of character occurrences given pieces of their own; the rarest rest go to byte "
        "fallback (0.9995 suits Chinese)",
    )
    num_threads: int = Field(
        default=TOKENIZER_DEFAULTS.num_threads,
        description="SentencePiece training threads (default: this machine's CPUs); the model does not depend on it",
    )
    adopt_from: str = Field(
        default="",
        description="a Hugging Face checkpoint folder whose SentencePiece tokenizer.model is taken instead of "
        "training one, so the tokens match the model that training_run's init_from continues; the settings above "
        "then do not apply",
    )
    extra_pieces: list[str] = Field(
        default=[],
        description="domain terms that are always one token: appended after an adopted tokenizer's last id (the "
        "model's embeddings and output head grow to match), or trained in as user-defined pieces",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        # Unset and without $LM_ASSETS_VOCAB_SIZE: the sample profile's where it is selected, else the tokenizer's own.
        fallback = launchpad_default("tokenizer", "vocab_size", TOKENIZER_DEFAULTS.vocab_size)
        return fill_from_environment(data, {"vocab_size": ("LM_ASSETS_VOCAB_SIZE", fallback)})


@dg.asset(
    group_name="tokens",
    kinds={"sentencepiece"},
    deps=["decontaminated_shard"],
    check_specs=[
        dg.AssetCheckSpec("roundtrip", asset="tokenizer", blocking=True,
                          description="decode(encode(x)) == x on a sample of English and Chinese documents."),
        dg.AssetCheckSpec("no_unk", asset="tokenizer", blocking=True, description="No `<unk>` on the sample."),
    ],
    description="A SentencePiece BPE model (byte fallback, split digits, CJK character coverage, lossless "
    "identity normalization) trained on a seeded sample drawn across all shards; or a Hugging Face checkpoint's "
    "own tokenizer (adopt_from), optionally extended with domain pieces, for continued pretraining.",
)
def tokenizer(
    context: dg.AssetExecutionContext, config: TokenizerTrainingConfig, storage: StorageResource
) -> dg.MaterializeResult:
    store = storage.storage()
    shards = shards_with(context.instance, store, lambda s: stage_keys("decontaminated", s)["documents"])
    if not shards:
        raise dg.Failure("no decontaminated shards yet: materialize decontaminated_shard first")
    frames = [store.read_parquet(stage_keys("decontaminated", s)["documents"], columns=["doc_id", "text", "lang"]) for s in shards]
    started = time.perf_counter()
    made = adopted_tokenizer(config) if config.adopt_from else trained_tokenizer(config, frames)
    seconds = time.perf_counter() - started
    store.write_bytes(TOKENIZER_KEYS["model"], made.model)
    store.write_bytes(TOKENIZER_KEYS["info"], json.dumps(made.metadata(), indent=1).encode())
    check_docs = check_sample(pl.concat(frames))
    report = tokenizer_report(made.processor(), check_docs["text"].to_list(), check_docs["lang"].to_list())
    if config.adopt_from:
        origin = {"adopted_from": dg.MetadataValue.path(made.source), "base_tokenizer_hash": made.base_hash,
                  "base_vocab_size": made.base_vocab_size, "added_pieces": dg.MetadataValue.json(list(made.added)),
                  "pieces_already_in_vocabulary": dg.MetadataValue.json(list(made.already_present))}  # fmt: skip
    else:
        origin = {"sample_docs": made.sample_docs, "sample_chars": made.sample_chars}
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(TOKENIZER_KEYS["model"])),
            "tokenizer_hash": made.hash,
            "vocab_size": made.vocab_size,
            **origin,
            "shards": len(shards),
            "fertility_en_tokens_per_word": round(report["fertility"].get("en", 0.0), 3),
            "fertility_zh_tokens_per_char": round(report["fertility"].get("zh", 0.0), 3),
            "byte_fallback_share": round(report["byte_fallback_share"], 5),
            **({} if config.adopt_from else {
                "normalization": "identity (lossless; text is NFC from extraction); newline is its own piece"}),
            "seconds": round(seconds, 2),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="roundtrip", passed=report["roundtrip_failures"] == 0,
                metadata={"docs": report["docs"], "failures": report["roundtrip_failures"],
                          "first_failures": dg.MetadataValue.json(report["first_roundtrip_failures"])},
            ),
            dg.AssetCheckResult(check_name="no_unk", passed=report["unk_count"] == 0, metadata={"unk": report["unk_count"]}),
        ],
    )


def trained_tokenizer(config: TokenizerTrainingConfig, frames: list[pl.DataFrame]) -> TrainedTokenizer:
    cfg = to_dataclass(TokenizerConfig, config, exclude=("adopt_from", "extra_pieces"))
    if config.extra_pieces:
        cfg = replace(cfg, user_defined_symbols=(*cfg.user_defined_symbols, *config.extra_pieces))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            return train_tokenizer(sample_documents(frames, cfg), cfg, tmp)
        except VocabSizeError as exc:
            raise dg.Failure(str(exc)) from exc


def adopted_tokenizer(config: TokenizerTrainingConfig) -> AdoptedTokenizer:
    try:
        return adopt_tokenizer(config.adopt_from, config.extra_pieces)
    except (OSError, ValueError) as exc:
        raise dg.Failure(f"cannot adopt the tokenizer of {config.adopt_from}: {exc}") from exc


def check_sample(docs: pl.DataFrame) -> pl.DataFrame:
    """Up to CHECK_SAMPLE_DOCS documents of each of English and Chinese, seeded."""
    parts = [g.sample(min(g.height, CHECK_SAMPLE_DOCS), seed=0) for _, g in docs.group_by("lang", maintain_order=True)]
    return pl.concat(parts) if parts else docs


def current_tokenizer(store):
    if not store.exists(TOKENIZER_KEYS["model"]):
        raise dg.Failure("no tokenizer yet: materialize tokenizer first")
    info = json.loads(store.read_bytes(TOKENIZER_KEYS["info"]))
    return load_tokenizer(store.read_bytes(TOKENIZER_KEYS["model"])), info


# tokenized_shard --------------------------------------------------------------------------------
@shard_asset(
    group_name="tokens",
    kinds={"sentencepiece", "numpy"},
    deps=["decontaminated_shard", tokenizer],
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=[
        shard_check_spec("index_matches_tokens", "tokenized_shard",
                         "Offsets and lengths tile the token file exactly, one row per document.", blocking=True),
    ],
    description="A flat little-endian token file (uint16 below 65,536 pieces, else uint32), a document index "
    "(doc_id, offset, length) and a JSON sidecar (dtype, token count, tokenizer hash).",
)
def tokenized_shard(context: dg.AssetExecutionContext, storage: StorageResource):
    yield from each_shard(context, lambda shard: tokenized_shard_of(shard, storage))


def tokenized_shard_of(shard: str, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.storage()
    sp, info = current_tokenizer(store)
    docs = store.read_parquet(stage_keys("decontaminated", shard)["documents"], columns=["doc_id", "text"])
    started = time.perf_counter()
    shard_tokens = tokenize_shard(docs, sp, info["tokenizer_hash"], num_threads=os.cpu_count() or 1)
    seconds = time.perf_counter() - started
    keys = tokenized_keys(shard)
    store.publish(stage_folder("tokenized", shard), {
        "tokens.bin": shard_tokens.to_bytes(),
        "index.parquet": shard_tokens.index,
        "tokens.json": json.dumps(shard_tokens.sidecar, indent=1).encode(),
    })
    tiles = index_tiles_tokens(shard_tokens.index, docs.height, shard_tokens.sidecar["token_count"])
    mb = docs["text"].str.len_bytes().sum() / 1e6
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(keys["tokens"])),
            "documents": docs.height,
            "tokens": shard_tokens.sidecar["token_count"],
            "dtype": shard_tokens.sidecar["dtype"],
            "tokenizer_hash": info["tokenizer_hash"],
            "mb_per_second": round(mb / seconds, 2) if seconds else 0.0,
        },
        check_results=[dg.AssetCheckResult(check_name="index_matches_tokens", passed=tiles)],
    )


@dg.asset_check(
    asset=tokenized_shard,
    description="Every tokenized shard was made with the current tokenizer; the ones that were not are stale "
    "and listed, to be re-materialized.",
)
def tokenized_with_current_tokenizer(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    store = storage.storage()
    info = json.loads(store.read_bytes(TOKENIZER_KEYS["info"]))
    shards = tokenized_shards(context.instance, store)
    stale = [s for s in shards if is_stale(json.loads(store.read_bytes(tokenized_keys(s)["sidecar"])), info["tokenizer_hash"])]
    return dg.AssetCheckResult(
        passed=not stale,
        metadata={"current_tokenizer_hash": info["tokenizer_hash"], "shards": len(shards), "stale": dg.MetadataValue.json(stale)},
    )


# packed_dataset ---------------------------------------------------------------------------------
PACKED_FILES = ("train.bin", "val.bin", "train_segments.parquet", "val_segments.parquet", "manifest.json")
PACKING_DEFAULTS = PackingConfig()
PackingStrategy = choices("PackingStrategy", STRATEGIES)
PackingCurriculum = choices("PackingCurriculum", CURRICULA)


class PackedDatasetConfig(dg.Config):
    model_config = ENUM_FIELDS_AS_VALUES

    seq_len: int | None = Field(
        default=None,
        description="tokens per sequence; "
        + unset_means("LM_ASSETS_SEQ_LEN", launchpad_default("packed_dataset", "seq_len", PACKING_DEFAULTS.seq_len))
        + defaults_note("packed_dataset"),
    )
    strategy: PackingStrategy = Field(
        default=PACKING_DEFAULTS.strategy,
        description="concat: documents joined and cut every seq_len tokens, no padding, a document may span "
        "sequences; bfd: best-fit decreasing, documents kept whole when they fit, padding",
    )
    val_fraction: float = Field(
        default=PACKING_DEFAULTS.val_fraction,
        description="share of documents (by a hash of doc_id, whatever the seed) held out for the val split",
    )
    seed: int = Field(
        default=PACKING_DEFAULTS.seed,
        description="drives the mixture's draws, the document order and the sequence shuffle; never the split",
    )
    curriculum: PackingCurriculum = Field(
        default=PACKING_DEFAULTS.curriculum,
        description="none: the first epoch is a plain shuffle; length, quality or perplexity: training starts "
        "easy-to-hard, shorter documents, higher-quality ones or those a reference model finds easiest first, over "
        "curriculum_fraction of the first epoch",
    )
    curriculum_reference: str = Field(
        default="",
        description="with curriculum perplexity: a Hugging Face Llama folder with this tokenizer (an earlier run's "
        "`checkpoints/<run>/step_N/hf` export, say) whose loss on each training sequence is its difficulty; it scores "
        "every training sequence once, on CUDA when there is one",
    )
    curriculum_fraction: float = Field(
        default=PACKING_DEFAULTS.curriculum_fraction,
        description="share of the first epoch's sequences the curriculum orders easiest first; the rest are shuffled",
    )
    mixture: dict[str, float] = Field(
        default=dict(PACKING_DEFAULTS.mixture),
        description='weights by `source:<name>` and `lang:<code>`: a document appears weight times on average '
        "(weights multiply; missing ones are 1); empty: every document once",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        # Unset and without $LM_ASSETS_SEQ_LEN: the sample profile's where it is selected, else packing's own.
        fallback = launchpad_default("packed_dataset", "seq_len", PACKING_DEFAULTS.seq_len)
        return fill_from_environment(data, {"seq_len": ("LM_ASSETS_SEQ_LEN", fallback)})


def reference_difficulty(context, folder: str, sp, result: PackedResult):
    """A reference model's loss on each training sequence, and what scored it (for the manifest)."""
    import hashlib

    import torch

    from lm_assets.evaluation.checkpoint import load_model
    from lm_assets.evaluation.perplexity import sequence_losses

    started = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        em = load_model(folder, device=device)
    except (OSError, ValueError) as exc:
        raise dg.Failure(f"cannot load the curriculum reference {folder}: {exc}") from exc
    theirs, ours = em.tokenizer, sp.get_piece_size()
    if theirs.get_piece_size() < ours or any(theirs.id_to_piece(i) != sp.id_to_piece(i) for i in range(ours)):
        raise dg.Failure(f"the curriculum reference {folder} has another tokenizer than the corpus: it cannot read "
                         "these tokens")  # fmt: skip
    n = result.num_sequences("train")
    scores = sequence_losses(em, lambda lo, hi: result.sequences("train", lo, hi), n, result.config.pad_id)
    digest = hashlib.sha256()
    with open(Path(folder) / "model.safetensors", "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    seconds = time.perf_counter() - started
    context.log.info(f"curriculum reference {folder} scored {n} sequences on {device} in {seconds:.1f} s")
    return scores, {"reference": folder, "reference_weights_sha256": digest.hexdigest(), "reference_device": device,
                    "reference_seconds": round(seconds, 2)}  # fmt: skip


def sequence_preview(result: PackedResult, decode) -> dg.MetadataValue:
    """A training sequence decoded, each document piece marked where it starts, EOS and padding shown: the
    first one that holds a document boundary, else the first."""
    if result.num_sequences("train") == 0:
        return dg.MetadataValue.md("_no training sequence_")
    segments = result.segments("train")
    pieces = segments.group_by("seq_index").len().filter(pl.col("len") > 1)
    index = int(pieces["seq_index"].min()) if pieces.height else 0
    shown = segments.filter(pl.col("seq_index") == index)
    text = render_sequence(result.sequences("train", index, index + 1)[0], shown, decode,
                           result.config.eos_id, result.config.pad_id)
    count = f"{shown.height} document piece{'s' if shown.height != 1 else ''}"
    return dg.MetadataValue.md(f"Sequence {index}: {count} in {result.config.seq_len} tokens\n\n{fenced(text)}")


def curriculum_view(packed: Path, data_seed: int = 0) -> dg.MetadataValue:
    """The curriculum as training reads it (`lm_assets.training.data`, the default data seed): the mean difficulty of
    the first epoch's positions in ten bins, easiest first within the curriculum's share, then shuffled."""
    import numpy as np

    from lm_assets.training.data import PackedDataset

    dataset = PackedDataset(packed, "train", seed=data_seed)
    difficulty = np.fromfile(packed / "train_difficulty.bin", dtype="<f4")
    scores = difficulty[dataset.first_epoch]
    bins = np.array_split(np.arange(len(scores)), min(10, len(scores)))
    frame = pl.DataFrame({
        "positions": [f"{b[0]}-{b[-1]}" for b in bins],
        "mean_difficulty": [round(float(scores[b].mean()), 4) for b in bins],
        "in_curriculum": [bool(b[0] < round(dataset.curriculum["fraction"] * len(scores))) for b in bins],
    })
    return markdown_table(frame)


def tokenized_shards(instance: dg.DagsterInstance, store) -> list[str]:
    return shards_with(instance, store, lambda s: tokenized_keys(s)["sidecar"])


def load_shard_tokens(store, shard: str, files: contextlib.ExitStack) -> ShardTokens:
    """A tokenized shard, memory-mapped from its folder (downloaded first from S3, kept until `files` closes)."""
    keys = tokenized_keys(shard)
    names = {name: Path(key).name for name, key in keys.items()}
    folder = files.enter_context(store.local_dir(stage_folder("tokenized", shard), names=list(names.values())))
    paths = {name: folder / file_name for name, file_name in names.items()}
    documents = store.read_parquet(stage_keys("decontaminated", shard)["documents"],
                                   columns=["doc_id", "source", "lang", "quality_score"])
    return ShardTokens.from_files(shard, paths["tokens"], paths["index"], paths["sidecar"], documents)


@dg.asset(
    group_name="tokens",
    kinds={"numpy", "parquet"},
    deps=[tokenized_shard, tokenizer],
    check_specs=[
        dg.AssetCheckSpec("splits_disjoint", asset="packed_dataset", blocking=True,
                          description="No document is in both train and val."),
    ],
    description="Fixed-length sequences (EOS between documents) in memory-mappable train/val files, split by a "
    "hash of doc_id, globally shuffled from a seed, mixed by source and language weights, with segment tables "
    "for lineage and a manifest of exactly what went in.",
)
def packed_dataset(
    context: dg.AssetExecutionContext, config: PackedDatasetConfig, storage: StorageResource
) -> dg.MaterializeResult:
    store = storage.storage()
    sp, info = current_tokenizer(store)
    shards = tokenized_shards(context.instance, store)
    if not shards:
        raise dg.Failure("no tokenized shards yet: materialize tokenized_shard first")
    ids = special_ids(sp)
    cfg = replace(to_dataclass(PackingConfig, config, exclude=("curriculum_reference",)), eos_id=ids["eos"], pad_id=ids["pad"])
    if (cfg.curriculum == "perplexity") != bool(config.curriculum_reference):
        raise dg.Failure("curriculum perplexity and curriculum_reference go together: the reference model scores "
                         "the sequences")  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as files:
        inputs = [load_shard_tokens(store, s, files) for s in shards]
        hashes = {s.name: s.tokenizer_hash for s in inputs}
        stale = sorted(name for name, h in hashes.items() if h != info["tokenizer_hash"])
        if stale:
            raise dg.Failure(f"tokenized with another tokenizer, re-materialize tokenized_shard for: {', '.join(stale)}")
        result = pack(inputs, cfg)
        out = Path(tmp) / "packed"
        difficulty, scored_by = reference_difficulty(context, config.curriculum_reference, sp, result) if (
            cfg.curriculum == "perplexity") else (None, None)
        manifest = write_packed(result, out, difficulty=difficulty, curriculum_info=scored_by)
        sequence_shown = sequence_preview(result, sp.decode)
        train_docs = set(result.segments("train")["doc_id"].unique().to_list())
        val_docs = set(result.segments("val")["doc_id"].unique().to_list())
        scored = ["train_difficulty.bin"] if "curriculum" in manifest else []
        for name in [*PACKED_FILES[:-1], *scored, PACKED_FILES[-1]]:  # the manifest last: its presence means the rest is complete
            store.write_bytes(packed_key(name), (out / name).read_bytes())
        curriculum = curriculum_view(out) if scored else None
    seconds = time.perf_counter() - started
    shares = pl.DataFrame(
        [
            {"key": f"{kind}:{k}", "requested_share": round(v["requested_share"], 4), "realized_share": round(v["realized_share"], 4)}
            for kind, table in (("source", manifest["mixture"]["by_source"]), ("lang", manifest["mixture"]["by_lang"]))
            for k, v in table.items()
        ]
    )
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(store.uri(PACKED_MANIFEST)),
            "seq_len": cfg.seq_len,
            "strategy": cfg.strategy,
            "train_sequences": manifest["splits"]["train"]["sequences"],
            "val_sequences": manifest["splits"]["val"]["sequences"],
            "tokens": sum(manifest["splits"][s]["tokens"] for s in ("train", "val")),
            "packing_efficiency": round(manifest["efficiency"], 4),
            "truncated_share": round(manifest["truncated_share"], 4),
            "mixture_shares": markdown_table(shares),
            "train_sequence": sequence_shown,
            "tokenizer_hash": info["tokenizer_hash"],
            "tokens_per_second": round(sum(manifest["splits"][s]["tokens"] for s in ("train", "val")) / seconds) if seconds else 0,
            **({"curriculum": dg.MetadataValue.json(manifest["curriculum"]), "curriculum_by_position": curriculum}
               if curriculum is not None else {}),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="splits_disjoint", passed=not (train_docs & val_docs),
                metadata={"train_docs": len(train_docs), "val_docs": len(val_docs), "in_both": len(train_docs & val_docs)},
            ),
        ],
    )
