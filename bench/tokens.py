"""Throughput of tokenization and packing: SentencePiece against HF `tokenizers`, our tokenize stage, `pack`.

Usage::

    .venv/bin/python bench/tokens.py [--crawl DIR] [--vocab 32000] [--mb 8] [--smoke]

The texts are the extracted, language-identified documents (en and zh) of a crawl (`bench/build_crawl.py`),
loaded as `bench/dedup_speed.py` loads them (`readers.read_shard`, `extract.extract_documents`,
`langid.identify_languages`); without `--crawl`, the crawl in `$OUT/dev-crawl` (else
`bench/out/dev-crawl`) is built or reused exactly as `bench/curation.py` does it. About `--mb` MB
(10^6 bytes of UTF-8) of them are measured: whole documents in a seeded random order until the total
reaches `--mb` (all of them if the crawl has less). `--smoke` runs in seconds, offline: the test slice
(`benchlib.paths.smoke_crawl`), a 2,000-piece vocabulary, 0.05 MB and 50,000 packed tokens, one repeat.

What is measured:

1. Encoding, SentencePiece against HF `tokenizers`, on the same texts. Our SentencePiece BPE
   model is trained with `tokenizer.train_tokenizer` (`--vocab` pieces, our `TokenizerConfig`)
   on `tokenizer.sample_documents` of every loaded document, so the measured texts are in its
   training sample. The HF tokenizer is the same model converted offline by transformers'
   `SpmConverter.build_tokenizer_from_spm_proto` (the converter transformers uses for a bare
   SentencePiece `.model`; it follows the model's own normalizer spec and user-defined pieces),
   with transformers' own `sentencepiece_model_pb2_new` to parse the file (the protobuf module
   shipped in the sentencepiece wheel needs a newer protobuf runtime than the one installed).
   Both must give identical ids: the output says on how many documents they do. Should the
   conversion fail, an HF BPE tokenizer with the same vocabulary size is trained on the same sample
   instead, and the output says so (its ids then differ, so it is a comparison of speed only).
   Timed: `sp.encode(texts, num_threads=N)` (Python lists of ids, and with
   `return_type="numpy"`), `Tokenizer.encode_batch(texts, add_special_tokens=False)` and
   `encode_batch_fast` (no offsets), at N = 1 and N = 2 threads. Each thread count runs in its
   own subprocess with `RAYON_NUM_THREADS=N` (rayon's pool size is fixed at first use).
2. Our tokenize stage: `tokens.tokenize_shard` on a polars frame (`doc_id`, `text`) of the same
   texts, against bare `sp.encode(texts, num_threads=N)`, in the same subprocesses. The overhead
   ratio is tokenize_shard's wall time over bare encode's (goal <= 1.1x); the scaling is the
   throughput at 2 threads over that at 1. The machine has 2 cores, so 2 threads is every core.
3. Packing. Synthetic tokenized shards in a temporary folder, written as the tokenize stage writes
   them (token file, index parquet, JSON sidecar) and memory-mapped with
   `ShardTokens.from_files`: about `--pack-mtokens` million random token ids in `--pack-shards`
   shards, document lengths drawn with replacement from the real per-document token counts of the
   crawl texts under our tokenizer (empty documents left out). For `concat` and `bfd` (seq_len
   2048, as in the recorded results; `PackingConfig` defaults otherwise: 1% val), timed apart:
   `pack()` (the layout), materializing every sequence of both splits with
   `PackedResult.iter_chunks` (a memory copy per piece into a reused buffer; nothing written), and
   `write_packed` into the temporary folder (materialization again, the segment tables and the
   files). Tokens/s counts the input documents' tokens. The shards were just written, so they are
   read from the page cache.

Every figure is wall time (`time.perf_counter()`), best of `--repeats` runs taken round-robin;
CPU time (`time.process_time()`, all threads) is given as well. MB/s per core is MB/s divided by
the thread count. One-time setup (imports, loading, a warm-up on a few documents) happens before
the clocks start. Other processes on the machine skew the figures, so for every timed call the
output gives the cores our process kept busy (CPU s / wall s) and the CPU time all other processes
took meanwhile (from /proc/stat), as a share of the machine's cores; it warns when other processes
took more than 10% of the cores beyond those our call left free (packing: over all of a strategy's
calls together, since each is shorter than /proc/stat's resolution allows).

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import os

# One thread for numerical libraries, set before numpy is imported; the subprocesses inherit it.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from benchlib.crawls import resolve_crawl  # noqa: E402
from benchlib.timing import Clock, rounded, timed  # noqa: E402
from benchlib.documents import load_documents, text_mb  # noqa: E402
from benchlib.paths import command_line  # noqa: E402

from lm_assets.corpus.tokens.packing import PACKED_SPLITS, PackingConfig, ShardTokens, pack, write_packed  # noqa: E402
from lm_assets.corpus.tokens.tokenize import (  # noqa: E402
    document_index,
    index_path,
    make_sidecar,
    sidecar_path,
    token_dtype,
    tokenize_shard,
    write_index,
    write_sidecar,
)
from lm_assets.corpus.tokens.tokenizer import (  # noqa: E402
    TokenizerConfig,
    TrainedTokenizer,
    load_tokenizer,
    sample_documents,
    train_tokenizer,
)

THREADS = (1, 2)
WARM_UP_DOCS = 20
GOAL_OVERHEAD = 1.1
GOAL_PACK_TOKENS_PER_S = 200e6
SELECTION_SEED = 0
BUSY_WARNING = 0.10  # warn when other processes used more than this share of the cores during a timed run
# /proc/stat counts in clock ticks (10 ms): shorter calls get no share of their own.
MIN_CONTENTION_WALL_S = 0.25
HF_FILENAME = "tokenizer.json"
TEXTS_FILENAME = "texts.parquet"
# name in the figures -> label in the tables
ENCODERS = {
    "sp_encode": "SentencePiece sp.encode (lists)",
    "sp_encode_numpy": "SentencePiece sp.encode (numpy)",
    "hf_encode_batch": "HF Tokenizer.encode_batch",
    "hf_encode_batch_fast": "HF Tokenizer.encode_batch_fast",
    "tokenize_shard": "ours: tokens.tokenize_shard",
}


# ---------------------------------------------------------------------------------------------
# Timing, and what the rest of the machine did meanwhile
# ---------------------------------------------------------------------------------------------


def system_busy_s() -> float | None:
    """CPU seconds all processes have spent so far (every core; /proc/stat), None off Linux."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measured:
    """One timed call: our CPU and wall time, the CPU time other processes took meanwhile, the result."""

    clock: Clock
    others_cpu_s: float | None
    result: object = None


def measure(work) -> Measured:
    gc.collect()
    before = system_busy_s()
    clock = Clock()
    with timed(clock):
        result = work()
    after = system_busy_s()
    others = None if before is None or after is None else max(0.0, after - before - clock.cpu_s)
    return Measured(clock, others, result)


def contention(measured: Measured) -> dict:
    """Cores our process kept busy, and the share of all cores that other processes used, during the call."""
    wall, cores = measured.clock.wall_s, os.cpu_count() or 1
    others = measured.others_cpu_s if wall >= MIN_CONTENTION_WALL_S else None
    return {
        "our_cores": rounded(measured.clock.cpu_s / wall if wall > 0 else None, 2),
        "others_cpu_s": rounded(others, 3),
        "others_core_share": rounded(min(1.0, others / (wall * cores)) if others is not None else None, 3),
    }


# ---------------------------------------------------------------------------------------------
# Texts and tokenizers
# ---------------------------------------------------------------------------------------------


def select_texts(docs: pl.DataFrame, mb: float) -> pl.DataFrame:
    """Whole documents in a seeded random order until `mb` MB of UTF-8 text, kept in crawl order."""
    sizes = docs["text"].str.len_bytes().to_numpy()
    order = np.random.default_rng(SELECTION_SEED).permutation(docs.height)
    total = np.cumsum(sizes[order])
    count = int(np.searchsorted(total, mb * 1e6)) + 1
    picked = np.sort(order[: min(count, docs.height)])
    return docs[picked].select("doc_id", "text", "lang")


def describe_texts(texts: pl.DataFrame) -> dict:
    by_lang = texts.group_by("lang").agg(pl.len().alias("docs"), pl.col("text").str.len_bytes().sum().alias("bytes"))
    return {
        "docs": texts.height,
        "text_mb": round(text_mb(texts["text"].to_list()), 3),
        "chars": int(texts["text"].str.len_chars().sum()),
        "by_language": {
            lang: {"docs": docs, "text_mb": round(size / 1e6, 3)}
            for lang, docs, size in by_lang.sort("bytes", descending=True).iter_rows()
        },
    }


def train_sentencepiece(docs: pl.DataFrame, vocab: int, out: Path) -> tuple[TrainedTokenizer, list[str], Clock]:
    """Our SentencePiece BPE on `sample_documents` of `docs`; the trainer uses every core (speed only)."""
    cfg = TokenizerConfig(vocab_size=vocab, num_threads=os.cpu_count() or 1)
    sample = sample_documents(docs, cfg)
    clock = Clock()
    with timed(clock):
        trained = train_tokenizer(sample, cfg, out)
    return trained, sample, clock


def convert_to_hf(model_path: Path):
    """The SentencePiece model as an HF `tokenizers.Tokenizer`, by transformers' converter, offline."""
    from transformers.convert_slow_tokenizer import SpmConverter
    from transformers.utils import sentencepiece_model_pb2_new as model_pb2

    proto = model_pb2.ModelProto()
    proto.ParseFromString(model_path.read_bytes())
    vocab = {piece.piece: i for i, piece in enumerate(proto.pieces)}
    tokenizer = SpmConverter.build_tokenizer_from_spm_proto(proto=proto, vocab=vocab, legacy=False)
    if tokenizer is None:
        raise RuntimeError("transformers' converter returned no tokenizer")
    return tokenizer


def train_hf_bpe(sample: list[str], vocab: int):
    """Fallback: an HF SentencePiece-style BPE trained on the same sample (ids differ from ours)."""
    from tokenizers import SentencePieceBPETokenizer

    tokenizer = SentencePieceBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator(
        sample, vocab_size=vocab, special_tokens=["<pad>", "<unk>", "<s>", "</s>"], show_progress=False
    )
    return tokenizer._tokenizer  # noqa: SLF001 - the underlying tokenizers.Tokenizer


def hf_tokenizer(model_path: Path, sample: list[str], vocab: int, out: Path) -> dict:
    """Write the HF tokenizer to `out`; says how it was made."""
    try:
        tokenizer = convert_to_hf(model_path)
        how = "converted from the SentencePiece model (transformers SpmConverter.build_tokenizer_from_spm_proto)"
        converted = True
    except Exception as exc:  # noqa: BLE001 - any failure of the conversion means "train instead"
        tokenizer = train_hf_bpe(sample, vocab)
        how = (
            f"conversion failed ({type(exc).__name__}: {str(exc)[:160]}); an HF SentencePieceBPETokenizer was "
            f"trained on the same sample with vocab_size={vocab} instead (speed comparison only, ids differ)"
        )
        converted = False
    tokenizer.save(str(out))
    return {
        "how": how,
        "converted": converted,
        "vocab_size": tokenizer.get_vocab_size(),
        "normalizer": repr(tokenizer.normalizer),
        "pre_tokenizer": repr(tokenizer.pre_tokenizer),
    }


# ---------------------------------------------------------------------------------------------
# Parts 1 and 2: encoding, one subprocess per thread count
# ---------------------------------------------------------------------------------------------


def encoders(sp, hf, frame: pl.DataFrame, tokenizer_hash: str, threads: int) -> dict:
    """name -> work(frame) for every encoder timed."""
    work = {
        "sp_encode": lambda f: sp.encode(f["text"].to_list(), num_threads=threads),
        "sp_encode_numpy": lambda f: sp.encode(f["text"].to_list(), num_threads=threads, return_type="numpy"),
        "hf_encode_batch": lambda f: hf.encode_batch(f["text"].to_list(), add_special_tokens=False),
        "hf_encode_batch_fast": lambda f: hf.encode_batch_fast(f["text"].to_list(), add_special_tokens=False),
        "tokenize_shard": lambda f: tokenize_shard(f, sp, tokenizer_hash, num_threads=threads),
    }
    if not hasattr(hf, "encode_batch_fast"):
        del work["hf_encode_batch_fast"]
    return work


def encode_child(spec: dict) -> dict:
    """Time every encoder at `spec["threads"]` threads (RAYON_NUM_THREADS is set by the parent)."""
    from tokenizers import Tokenizer

    threads, repeats = spec["threads"], spec["repeats"]
    sp = load_tokenizer(spec["model"])
    hf = Tokenizer.from_file(spec["hf"])
    frame = pl.read_parquet(spec["texts"]).select("doc_id", "text")
    texts = frame["text"].to_list()
    mb = text_mb(texts)
    work = encoders(sp, hf, frame, spec["tokenizer_hash"], threads)
    for run in work.values():
        run(frame.head(WARM_UP_DOCS))

    best: dict[str, Measured] = {}
    last: dict[str, object] = {}
    for _ in range(repeats):  # round-robin, so drift in the machine's load hits every encoder alike
        for name, run in work.items():
            last.pop(name, None)
            measured = measure(lambda run=run: run(frame))
            last[name] = measured.result
            measured.result = None
            if name not in best or measured.clock.wall_s < best[name].clock.wall_s:
                best[name] = measured

    tokens = {
        "sp_encode": sum(map(len, last["sp_encode"])),
        "sp_encode_numpy": sum(map(len, last["sp_encode_numpy"])),
        "hf_encode_batch": sum(len(e.ids) for e in last["hf_encode_batch"]),
        "tokenize_shard": int(last["tokenize_shard"].sidecar["token_count"]),
    }
    if "hf_encode_batch_fast" in last:
        tokens["hf_encode_batch_fast"] = sum(len(e.ids) for e in last["hf_encode_batch_fast"])
    sides = {name: encode_figures(mb, threads, measured, tokens[name]) for name, measured in best.items()}
    sp_ids = last["sp_encode"]
    hf_ids = [e.ids for e in last["hf_encode_batch"]]
    same_docs = sum(a == b for a, b in zip(sp_ids, hf_ids, strict=True))
    same_tokens = sum(
        sum(1 for x, y in zip(a, b) if x == y) if a != b else len(a) for a, b in zip(sp_ids, hf_ids, strict=True)
    )
    stage = last["tokenize_shard"]
    flat = np.concatenate([np.asarray(a, dtype=np.int64) for a in sp_ids]) if sp_ids else np.empty(0, np.int64)
    return {
        "threads": threads,
        "rayon_num_threads": os.environ.get("RAYON_NUM_THREADS"),
        "repeats": repeats,
        "docs": len(texts),
        "text_mb": round(mb, 3),
        "encoders": sides,
        "hf_identical_docs": same_docs,
        "hf_identical_token_share": round(same_tokens / max(1, sum(map(len, sp_ids))), 6),
        "tokenize_shard_equals_sp_encode": bool(np.array_equal(np.asarray(stage.tokens, dtype=np.int64), flat)),
        "doc_lengths": stage.index["length"].to_list() if spec.get("return_lengths") else None,
    }


def encode_figures(mb: float, threads: int, measured: Measured, tokens: int) -> dict:
    clock = measured.clock
    per_s = mb / clock.wall_s if clock.wall_s > 0 else None
    return {
        "wall_s": round(clock.wall_s, 3),
        "cpu_s": round(clock.cpu_s, 3),
        "tokens": tokens,
        "mb_per_s": rounded(per_s, 3),
        "mb_per_s_per_core": rounded(per_s / threads if per_s else None, 3),
        "mb_per_cpu_s": rounded(mb / clock.cpu_s if clock.cpu_s > 0 else None, 3),
        "mtokens_per_s": rounded(tokens / clock.wall_s / 1e6 if clock.wall_s > 0 else None, 3),
        **contention(measured),
    }


def run_encode_child(spec: dict) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(spec["threads"]), "TOKENIZERS_PARALLELISM": "true"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child-spec", json.dumps(spec)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {spec['threads']}-thread encode run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def encode_benchmark(model: Path, hf: Path, texts: Path, tokenizer_hash: str, repeats: int) -> dict[int, dict]:
    runs = {}
    for threads in THREADS:
        print(f"  encoding at {threads} thread(s)...", flush=True)
        spec = {
            "threads": threads,
            "repeats": repeats,
            "model": str(model),
            "hf": str(hf),
            "texts": str(texts),
            "tokenizer_hash": tokenizer_hash,
            "return_lengths": threads == 1,
        }
        runs[threads] = run_encode_child(spec)
    return runs


def encode_summary(runs: dict[int, dict]) -> dict:
    """HF over SentencePiece, the tokenize stage's overhead and the 1 -> 2 thread scaling."""

    def speed(threads: int, name: str) -> float | None:
        side = runs[threads]["encoders"].get(name)
        return side["mb_per_s"] if side else None

    def wall(threads: int, name: str) -> float:
        return runs[threads]["encoders"][name]["wall_s"]

    hf_over_sp = {
        threads: {
            "encode_batch": _ratio(speed(threads, "hf_encode_batch"), speed(threads, "sp_encode")),
            "encode_batch_fast": _ratio(speed(threads, "hf_encode_batch_fast"), speed(threads, "sp_encode")),
        }
        for threads in runs
    }
    overhead = {threads: _ratio(wall(threads, "tokenize_shard"), wall(threads, "sp_encode")) for threads in runs}
    overhead_numpy = {
        threads: _ratio(wall(threads, "tokenize_shard"), wall(threads, "sp_encode_numpy")) for threads in runs
    }
    low, high = min(runs), max(runs)
    scaling = {name: _ratio(speed(high, name), speed(low, name)) for name in runs[low]["encoders"]}
    return {
        "hf_over_sp_speed": hf_over_sp,
        "tokenize_shard_overhead": overhead,
        "tokenize_shard_overhead_vs_numpy": overhead_numpy,
        "goal_overhead": GOAL_OVERHEAD,
        "goal_overhead_met": {
            threads: ratio is not None and ratio <= GOAL_OVERHEAD for threads, ratio in overhead.items()
        },
        "scaling": {"threads": [low, high], "speedup": scaling},
    }


# ---------------------------------------------------------------------------------------------
# Part 3: packing
# ---------------------------------------------------------------------------------------------


def build_shards(
    folder: Path, lengths: np.ndarray, total_tokens: int, n_shards: int, vocab: int, seed: int
) -> tuple[list[ShardTokens], dict]:
    """Tokenized shards as the tokenize stage writes them, memory-mapped back; lengths resampled from `lengths`."""
    rng = np.random.default_rng(seed)
    pool = lengths[lengths > 0]
    if not len(pool):
        raise RuntimeError("no non-empty documents to take packing lengths from")
    dtype = token_dtype(vocab)
    per_shard = max(1, total_tokens // n_shards)
    shards, all_lengths = [], []
    for number in range(n_shards):
        draw = rng.choice(pool, size=int(per_shard / pool.mean() * 1.2) + 16)
        while draw.sum() < per_shard:
            draw = np.concatenate([draw, rng.choice(pool, size=len(draw))])
        draw = draw[: int(np.searchsorted(np.cumsum(draw), per_shard)) + 1].astype(np.int64)
        name = f"synthetic-{number:03d}"
        path = folder / name
        rng.integers(5, vocab, size=int(draw.sum()), dtype=np.uint32).astype(dtype).tofile(path)
        doc_ids = [f"{name}/{i:07d}" for i in range(len(draw))]
        write_index(index_path(path), document_index(doc_ids, draw))
        write_sidecar(sidecar_path(path), make_sidecar(int(draw.sum()), len(draw), "synthetic", vocab))
        shards.append(ShardTokens.from_files(name, path, index_path(path), sidecar_path(path)))
        all_lengths.append(draw)
    drawn = np.concatenate(all_lengths)
    return shards, {
        "shards": n_shards,
        "tokens": int(drawn.sum()),
        "documents": len(drawn),
        "dtype": np.dtype(dtype).name,
        "doc_tokens_mean": round(float(drawn.mean()), 1),
        "doc_tokens_percentiles": {
            str(q): int(v) for q, v in zip((10, 50, 90, 99), np.percentile(drawn, (10, 50, 90, 99)), strict=True)
        },
        "doc_tokens_max": int(drawn.max()),
        "length_pool_docs": len(pool),
    }


def materialize(result) -> int:
    """Every row of every split through `iter_chunks`; returns the tokens produced."""
    produced = 0
    for split in PACKED_SPLITS:
        for chunk in result.iter_chunks(split):
            produced += chunk.size
    return produced


def pack_benchmark(shards: list[ShardTokens], strategy: str, folder: Path, repeats: int) -> dict:
    """Every timed call of one strategy; `others_core_share` covers all of them together."""
    whole = measure(lambda: pack_strategy(shards, strategy, folder, repeats))
    return {**whole.result, "all_calls": contention(whole)}


def pack_strategy(shards: list[ShardTokens], strategy: str, folder: Path, repeats: int) -> dict:
    cfg = PackingConfig(seq_len=2048, strategy=strategy)
    tokens = sum(len(s.tokens) for s in shards)
    out = folder / f"packed-{strategy}"
    layout, chunks, written, result = None, None, None, None
    for _ in range(repeats):
        result = None
        run = measure(lambda: pack(shards, cfg))
        result = run.result
        layout = faster(layout, run)
        run = measure(lambda: materialize(result))
        produced = run.result
        chunks = faster(chunks, run)
        run = measure(lambda: write_packed(result, out))  # replaces the files of the previous repeat
        manifest = run.result
        written = faster(written, run)
    layout.result = chunks.result = written.result = None
    written_bytes = sum(f.stat().st_size for f in out.iterdir())
    shutil.rmtree(out)
    splits = manifest["splits"]
    return {
        "strategy": strategy,
        "seq_len": cfg.seq_len,
        "val_fraction": cfg.val_fraction,
        "input_tokens": tokens,
        "output_tokens": produced,
        "sequences": {split: splits[split]["sequences"] for split in PACKED_SPLITS},
        "efficiency": round(manifest["efficiency"], 5),
        "truncated_share": round(manifest["truncated_share"], 5),
        "split_share": {split: round(splits[split]["split_share"], 5) for split in PACKED_SPLITS},
        "layout": pack_figures(tokens, layout),
        "iter_chunks": pack_figures(tokens, chunks),
        "layout_plus_iter_chunks": pack_figures(
            tokens,
            Measured(layout.clock + chunks.clock, _add(layout.others_cpu_s, chunks.others_cpu_s)),
        ),
        "write_packed": {**pack_figures(tokens, written), "bytes": written_bytes},
    }


def faster(best: Measured | None, run: Measured) -> Measured:
    return run if best is None or run.clock.wall_s < best.clock.wall_s else best


def pack_figures(tokens: int, measured: Measured) -> dict:
    clock = measured.clock
    return {
        "wall_s": round(clock.wall_s, 4),
        "cpu_s": round(clock.cpu_s, 4),
        "mtokens_per_s": rounded(tokens / clock.wall_s / 1e6 if clock.wall_s > 0 else None, 1),
        **contention(measured),
    }


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def packing_benchmark(lengths: np.ndarray, args: argparse.Namespace, vocab: int, folder: Path) -> dict:
    shard_folder = folder / "shards"
    shard_folder.mkdir()
    clock = Clock()
    with timed(clock):
        shards, corpus = build_shards(
            shard_folder, lengths, int(args.pack_mtokens * 1e6), args.pack_shards, vocab, args.seed
        )
    corpus["build_wall_s"] = round(clock.wall_s, 3)
    print(
        f"  {corpus['tokens']:,} tokens in {corpus['documents']:,} documents, {corpus['shards']} shards "
        f"(built in {clock.wall_s:.1f} s)",
        flush=True,
    )
    strategies = {}
    for strategy in ("concat", "bfd"):
        print(f"  {strategy}...", flush=True)
        strategies[strategy] = pack_benchmark(shards, strategy, folder, args.repeats)
    concat = strategies["concat"]
    goal = {
        part: (concat[part]["mtokens_per_s"] or 0.0) * 1e6 >= GOAL_PACK_TOKENS_PER_S
        for part in ("layout", "iter_chunks", "layout_plus_iter_chunks")
    }
    return {
        "corpus": corpus,
        "strategies": strategies,
        "goal_concat_tokens_per_s": GOAL_PACK_TOKENS_PER_S,
        "goal_concat_met": goal,
    }


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_encoding(report: dict) -> None:
    runs, summary, texts = report["encode"], report["summary"], report["texts"]
    langs = ", ".join(f"{k} {v['docs']} docs / {v['text_mb']:.2f} MB" for k, v in texts["by_language"].items())
    tok = report["tokenizer"]
    print()
    print(f"texts: {texts['docs']} documents, {texts['text_mb']:.2f} MB ({langs})")
    print(
        f"SentencePiece BPE: {tok['vocab_size']} pieces, trained on {tok['sample_docs']} documents "
        f"({tok['sample_chars']:,} chars) in {tok['train_wall_s']:.1f} s; the measured texts are in the sample"
    )
    hf = report["hf_tokenizer"]
    one = runs[min(runs)]
    print(f"HF tokenizer: {hf['how']}")
    if hf["converted"]:
        print(
            f"  ids identical to SentencePiece on {one['hf_identical_docs']}/{one['docs']} documents "
            f"({one['hf_identical_token_share']:.4%} of tokens)"
        )
    print()
    print("1. encode throughput (wall, best of round-robin repeats)")
    header = (
        f"{'threads':>7}  {'encoder':<33} {'wall s':>7} {'CPU s':>7} {'MB/s':>7} {'MB/s/core':>10} "
        f"{'MB/CPU-s':>9} {'Mtok/s':>7} {'cores':>6} {'others':>7}"
    )
    print(header)
    print("-" * len(header))
    for threads, run in runs.items():
        for name in ("sp_encode", "sp_encode_numpy", "hf_encode_batch", "hf_encode_batch_fast"):
            if name in run["encoders"]:
                print_encoder_row(threads, ENCODERS[name], run["encoders"][name])
    for threads, ratios in summary["hf_over_sp_speed"].items():
        print(
            f"HF/SentencePiece speed at {threads} thread(s): encode_batch {_fmt(ratios['encode_batch'], '.2f')}x, "
            f"encode_batch_fast {_fmt(ratios['encode_batch_fast'], '.2f')}x (above 1: HF is faster)"
        )
    print()
    print("2. our tokenize stage against bare sp.encode")
    print(header)
    print("-" * len(header))
    for threads, run in runs.items():
        for name in ("sp_encode", "sp_encode_numpy", "tokenize_shard"):
            print_encoder_row(threads, ENCODERS[name], run["encoders"][name])
    for threads, ratio in summary["tokenize_shard_overhead"].items():
        met = "met" if summary["goal_overhead_met"][threads] else "NOT met"
        print(
            f"overhead at {threads} thread(s): tokenize_shard / sp.encode (lists) = {_fmt(ratio, '.3f')}x "
            f"(goal <= {GOAL_OVERHEAD}x: {met}); / sp.encode (numpy) = "
            f"{_fmt(summary['tokenize_shard_overhead_vs_numpy'][threads], '.3f')}x"
        )
    scaling = summary["scaling"]
    low, high = scaling["threads"]
    speedups = ", ".join(f"{ENCODERS[name]} {_fmt(v, '.2f')}x" for name, v in scaling["speedup"].items())
    print(f"scaling {low} -> {high} threads (this machine has {report['cpu_count']} cores): {speedups}")
    equal = all(r["tokenize_shard_equals_sp_encode"] for r in runs.values())
    print(f"tokenize_shard's tokens equal sp.encode's at every thread count: {equal}")
    print(
        "cores: our process's CPU s / wall s; others: CPU time of every other process during the run, "
        "as a share of all cores (from /proc/stat)"
    )


def print_encoder_row(threads: int, label: str, row: dict) -> None:
    print(
        f"{threads:>7}  {label:<33} {row['wall_s']:>7.2f} {row['cpu_s']:>7.2f} {_fmt(row['mb_per_s'], '>7.2f')} "
        f"{_fmt(row['mb_per_s_per_core'], '>10.2f')} {_fmt(row['mb_per_cpu_s'], '>9.2f')} "
        f"{_fmt(row['mtokens_per_s'], '>7.2f')} {_fmt(row['our_cores'], '>6.2f')} "
        f"{_fmt(_percent(row['others_core_share']), '>6.0f')}%"
    )


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def print_packing(packing: dict) -> None:
    corpus = packing["corpus"]
    pct = corpus["doc_tokens_percentiles"]
    print()
    print(
        f"3. packing {corpus['tokens']:,} tokens ({corpus['dtype']}, memory-mapped) in {corpus['documents']:,} "
        f"documents, {corpus['shards']} shards; tokens per document: mean {corpus['doc_tokens_mean']:.0f}, "
        f"p10 {pct['10']}, p50 {pct['50']}, p90 {pct['90']}, p99 {pct['99']}, max {corpus['doc_tokens_max']} "
        f"(resampled from {corpus['length_pool_docs']} crawl documents)"
    )
    header = f"{'strategy':<9} {'step':<26} {'wall s':>8} {'CPU s':>8} {'M tokens/s':>11}"
    print(header)
    print("-" * len(header))
    for strategy, row in packing["strategies"].items():
        for step, label in (
            ("layout", "pack() (layout)"),
            ("iter_chunks", "iter_chunks (materialize)"),
            ("layout_plus_iter_chunks", "layout + iter_chunks"),
            ("write_packed", "write_packed (files)"),
        ):
            fig = row[step]
            print(
                f"{strategy if step == 'layout' else '':<9} {label:<26} {fig['wall_s']:>8.3f} {fig['cpu_s']:>8.3f} "
                f"{_fmt(fig['mtokens_per_s'], '>11.1f')}"
            )
    for strategy, row in packing["strategies"].items():
        print(
            f"{strategy}: {row['sequences']['train']:,} train + {row['sequences']['val']:,} val sequences of "
            f"{row['seq_len']}, efficiency {row['efficiency']:.4f}, documents split across sequences "
            f"{row['split_share']['train']:.3f}, truncated {row['truncated_share']:.4f}; other processes used "
            f"{_fmt(_percent(row['all_calls']['others_core_share']), '.0f')}% of the cores during its timed calls"
        )
    met = packing["goal_concat_met"]
    print(
        f"concat goal >= {GOAL_PACK_TOKENS_PER_S / 1e6:.0f}M tokens/s: layout {'met' if met['layout'] else 'NOT met'}, "
        f"iter_chunks {'met' if met['iter_chunks'] else 'NOT met'}, "
        f"layout + iter_chunks {'met' if met['layout_plus_iter_chunks'] else 'NOT met'}"
    )


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: the test slice, tiny sizes")
    parser.add_argument("--vocab", type=int, default=32_000, help="SentencePiece vocabulary size (32000)")
    parser.add_argument("--mb", type=float, default=8.0, help="MB of text encoded (8; at most the crawl's texts)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement; the fastest counts (3)")
    parser.add_argument("--pack-mtokens", type=float, default=64.0, help="million tokens in the packing shards (64)")
    parser.add_argument("--pack-shards", type=int, default=8, help="packing shards (8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic packing shards (0)")
    parser.add_argument("--child-spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.vocab, args.mb, args.repeats, args.pack_mtokens, args.pack_shards = 2000, 0.05, 1, 0.05, 2
    if min(args.vocab, args.repeats, args.pack_shards) < 1 or args.mb <= 0 or args.pack_mtokens <= 0:
        parser.error("--vocab, --repeats, --pack-shards, --mb and --pack-mtokens must be positive")
    return args


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    load_before = load_average()
    crawl = resolve_crawl(args)
    docs = load_documents(crawl, sys.maxsize)
    texts = select_texts(docs, args.mb)
    described = describe_texts(texts)
    print(
        f"crawl {crawl}: {docs.height} documents; measuring {described['docs']} of them, "
        f"{described['text_mb']:.2f} MB (asked for {args.mb:g})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp:
        folder = Path(tmp)
        print(f"training SentencePiece BPE, vocab {args.vocab}...", flush=True)
        trained, sample, train_clock = train_sentencepiece(docs, args.vocab, folder / "sp")
        hf = hf_tokenizer(trained.path, sample, args.vocab, folder / HF_FILENAME)
        texts.write_parquet(folder / TEXTS_FILENAME)
        print("encoding (one subprocess per thread count)...", flush=True)
        runs = encode_benchmark(trained.path, folder / HF_FILENAME, folder / TEXTS_FILENAME, trained.hash, args.repeats)
        lengths = np.asarray(runs[1].pop("doc_lengths"), dtype=np.int64)
        for run_ in runs.values():
            run_.pop("doc_lengths", None)
        print("packing...", flush=True)
        packing = packing_benchmark(lengths, args, trained.vocab_size, folder)
    calls = timed_calls(runs, packing)
    return {
        "command": command_line(),
        "crawl": str(crawl),
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "texts": described,
        "tokenizer": {
            "vocab_size": trained.vocab_size,
            "hash": trained.hash,
            "sample_docs": trained.sample_docs,
            "sample_chars": trained.sample_chars,
            "train_wall_s": round(train_clock.wall_s, 3),
            "train_threads": trained.config.num_threads,
        },
        "hf_tokenizer": hf,
        "encode": runs,
        "summary": encode_summary(runs),
        "packing": packing,
        "max_others_core_share": max((c["others_core_share"] for c in calls), default=None),
        "contended_calls": [c for c in calls if c["excess_share"] > BUSY_WARNING],
        "total_wall_s": round(time.perf_counter() - started, 1),
    }


def timed_calls(runs: dict[int, dict], packing: dict) -> list[dict]:
    """The share of the cores other processes took during each timed call (each packing strategy as one).

    `excess_share` is that share less the cores the call left free (those beyond its own threads).
    """
    cores = os.cpu_count() or 1
    calls = [
        (f"{name} at {threads} thread(s)", threads, side["others_core_share"])
        for threads, run in runs.items()
        for name, side in run["encoders"].items()
    ]
    calls += [
        (f"packing {name}", 1, row["all_calls"]["others_core_share"]) for name, row in packing["strategies"].items()
    ]
    return [
        {
            "call": call,
            "threads": threads,
            "others_core_share": share,
            "excess_share": round(share - max(0, cores - threads) / cores, 3),
        }
        for call, threads, share in calls
        if share is not None
    ]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child_spec:
        print(json.dumps(encode_child(json.loads(args.child_spec))))
        return 0
    try:
        report = run(args)
    except RuntimeError as exc:
        print(f"bench/tokens.py: {exc}", file=sys.stderr)
        return 2
    print_encoding(report)
    print_packing(report["packing"])
    print()
    print(
        f"load average before {report['load_average_before']}, after {report['load_average_after']}; "
        f"total {report['total_wall_s']:.0f} s"
    )
    contended = report["contended_calls"]
    if contended:
        calls = ", ".join(f"{c['call']} ({c['others_core_share']:.0%})" for c in contended)
        print(
            f"WARNING: other processes took cores these calls needed: {calls}; "
            "their figures understate what an idle machine does"
        )
    print(f"command: {report['command']}")
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
