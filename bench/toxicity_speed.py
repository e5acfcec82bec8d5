"""Toxicity scoring speed per backend and device: alt-profanity-check, Detoxify on every line, Detoxify behind
the pre-screen; and the toxicity step's share of curation.

Usage::

    .venv/bin/python bench/toxicity_speed.py [--crawl DIR] [--docs 150] [--device auto] [--smoke]

The documents are the first `--docs` extracted HTML documents of the development crawl, language-identified
(English and Chinese kept) for the toxicity step; the curation share runs all of curation on them. Detoxify's `original` model is bert-base-uncased; its release
checkpoint cannot be downloaded here, so a randomly initialised BERT of the same shape in the same
checkpoint format is built into `$OUT/toxicity_speed/` and loaded through the real loader: its speed is the
real model's, its scores mean nothing (so the lines it would flag are not measured here, only how many
reach it). The default backend (`auto`) is the one of these that the device picks. Each backend runs `score_toxicity` on the same documents once warmed up; CPU seconds are this
process's (all threads). `--smoke`: 20 documents of the test slice and a tiny BERT.

It prints figures; it checks nothing. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import polars as pl
from benchlib.crawls import find_shards, resolve_crawl
from benchlib.detoxify_model import BERT_BASE, build_detoxify_checkpoint
from benchlib.paths import command_line, out_dir
from benchlib.timing import Clock, timed

from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
from lm_assets.corpus.curation.langid import LangIdConfig, identify_languages
from lm_assets.corpus.curation.pipeline import CurationConfig, curate
from lm_assets.corpus.ingest.readers import read_shard
from lm_assets.corpus.curation.toxicity import ToxicityConfig, chosen_backend, resolve_device, score_toxicity

TINY = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32,
        "max_position_embeddings": 64}  # fmt: skip


def extracted_documents(crawl: Path, count: int) -> pl.DataFrame:
    """The first `count` extracted HTML documents of the crawl, with every column extraction gives."""
    frames, total = [], 0
    for shard in find_shards(crawl):
        html = read_shard(shard).documents.filter(pl.col("html").is_not_null())
        frames.append(extract_documents(html, ExtractConfig()).kept)
        total += frames[-1].height
        if total >= count:
            break
    return pl.concat(frames).head(count)


def vocabulary(texts: list[str], size: int = 30_000) -> list[str]:
    counts = Counter(word for text in texts for word in re.findall(r"\w+", text.lower()))
    return [word for word, _ in counts.most_common(size)]


def measure(docs, config: ToxicityConfig) -> dict:
    score_toxicity(docs.head(2), config)  # load the models
    clock = Clock()
    with timed(clock):
        result = score_toxicity(docs, config)
    stats = result.stats
    return {
        "model": stats["model"], "prescreen": stats["prescreen"], "docs": docs.height, "lines": stats["lines"],
        "lines_scored_by_model": stats["lines_scored_by_model"], "cpu_s": round(clock.cpu_s, 2),
        "wall_s": round(clock.wall_s, 2), "docs_per_cpu_s": round(docs.height / clock.cpu_s, 1) if clock.cpu_s else None,
        "lines_per_s": round(stats["lines"] / clock.wall_s, 1) if clock.wall_s else None,
    }


def curation_share(docs, config: ToxicityConfig) -> dict:
    """The toxicity step's share of the curation steps' seconds (default policy)."""
    curated = curate(docs, CurationConfig(toxicity=config))
    seconds = {step: stats["seconds"] for step, stats in curated.stats.items()}
    total = sum(seconds.values())
    return {"seconds_by_step": seconds, "toxicity_share": round(seconds.get("toxicity", 0.0) / total, 3) if total else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl)")
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    extracted = extracted_documents(resolve_crawl(args), 20 if args.smoke else args.docs)
    docs = identify_languages(extracted, LangIdConfig()).kept  # what the toxicity step receives
    folder = out_dir("toxicity_speed", "tiny" if args.smoke else "bert-base")
    shape = TINY if args.smoke else BERT_BASE
    checkpoint = folder / "model.ckpt"
    hf_dir = folder / "hf"
    if not checkpoint.exists():
        print(f"building a random {'tiny BERT' if args.smoke else 'bert-base'} in Detoxify's format in {folder}", flush=True)
        checkpoint, hf_dir = build_detoxify_checkpoint(folder, vocabulary(docs["text"].to_list()), shape)
    detoxify = {"backend": "detoxify", "detoxify_checkpoint": str(checkpoint), "detoxify_hf_config_path": str(hf_dir),
                "device": args.device}  # fmt: skip
    runs = {
        "alt-profanity-check": ToxicityConfig(backend="profanity_check"),
        "detoxify, every line": ToxicityConfig(**detoxify, prescreen_threshold=None),
        "detoxify behind the pre-screen": ToxicityConfig(**detoxify),
    }
    print(f"{docs.height} documents, device {resolve_device(args.device)}")
    figures = {}
    for name, config in runs.items():
        figures[name] = measure(docs, config)
        row = figures[name]
        print(f"  {name:<32} {row['docs_per_cpu_s']:>8} docs/CPU-s {row['lines_per_s']:>9} lines/s  "
              f"{row['lines_scored_by_model']:>6} of {row['lines']} lines to the model", flush=True)
    shares = {name: curation_share(extracted, runs[name]) for name in ("alt-profanity-check", "detoxify behind the pre-screen")}
    default, why = chosen_backend(ToxicityConfig(device=args.device))
    shares[f"every default (auto: {default.backend})"] = shares["alt-profanity-check" if default.backend == "profanity_check"
                                                               else "detoxify behind the pre-screen"]  # fmt: skip
    print(f"  the default backend here: {default.backend} ({why})")
    for name, share in shares.items():
        print(f"  toxicity's share of curation, {name}: {share['toxicity_share']}")
    print(json.dumps({"command": command_line(), "device": resolve_device(args.device), "backends": figures,
                      "curation_share": shares}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
