"""Throughput of our extraction, filters and raw -> curated path against datatrove's, on the same documents.

Usage::

    .venv/bin/python bench/curation.py [--crawl DIR] [--max-docs N] [--smoke]

`--crawl` takes a crawl folder as `bench/build_crawl.py` writes it (gzip WARC shards `crawl-*.warc.gz` and
`truth.json`). Without it, the labelled development crawl (bench/dev_set/README.md: 4000 source pages
of English and Chinese manuals in shards of 500) is built into `$OUT/dev-crawl`, else
`bench/out/dev-crawl` (an existing one built with the same arguments is reused). `--smoke` runs in
seconds, offline: 20 documents of the test slice (`benchlib.paths.smoke_crawl`).

What is measured, in one process, side by side:

1. Extraction, HTML record -> plain text.
   Ours: `readers.read_shard` on every shard, then `extract.extract_documents` (`main_content`).
   Datatrove: `WarcReader.read_file` on the same shards (warcio), then `Trafilatura.extract` per
   document with datatrove's defaults (favour_precision, deduplicate). `Trafilatura.run` would send
   every page to a sandbox subprocess whose CPU time this process cannot see, so `extract()` is
   called in-process instead; datatrove's 1 s per-document timeout therefore does not apply.
   Both sides read all records of the shards used, and both extract exactly the same HTML
   records: our reader's HTML documents (at most `--max-docs`, in shard order), matched to
   datatrove's documents by shard name and record index. Pages datatrove's reader yields on top
   (its reader keeps 404 and 301 pages) are read but not extracted.

2. Filters, plain text -> kept documents. Both chains get our extracted texts.
   Ours: `langid.identify_languages` (fastText lid.176 over windows of the whole text, en and zh
   kept) then `quality.apply_rules` with the pipeline's default preset (`lm_assets`).
   Datatrove: `LanguageFilter` (en, zh; the bench downloads nothing, so its fastText model is the
   quantized lid.176.ftz our language ID loads, in place of the lid.176.bin it would download), `GopherRepetitionFilter`,
   `GopherQualityFilter`, `C4QualityFilter`, `FineWebQualityFilter`, all with default settings
   (English), chained as generators exactly as a datatrove pipeline runs them.
   Datatrove's English word tokenizer is spaCy's blank "en" pipeline (no model download); when
   spaCy is not installed, an NLTK tokenizer that needs no downloaded data is used instead
   (`--dt-tokenizer` picks one explicitly). The output names the one used.

3. Extraction + filters: the sum of the two stages for each side. Datatrove's filters ran on our
   texts, so its total is "datatrove extraction + datatrove filters on the same documents".

4. The whole path, raw WARC -> curated documents, each side as its pipeline runs it.
   Ours: the reader and extraction of 1., then `pipeline.curate` with every default of
   `curated_shard` (language ID, the quality rules, the shipped quality classifier deciding, PII
   redaction), toxicity by the offline `profanity_check` backend (`--toxicity` picks another).
   Datatrove's whole FineWeb pipeline: its reader and Trafilatura of 1., then on Trafilatura's texts
   `LanguageFilter`, the Gopher, C4 and FineWeb filters and `PIIFormatter`, chained as one pipeline.
   Each step's share of our curation time is printed, toxicity's among them.

CPU time is `time.process_time()` (all threads of this process); wall time is
`time.perf_counter()`. One-time setup (imports, model and tokenizer loading) happens before the
clocks start. docs/CPU-s counts the documents that entered a stage; the ratio is ours/datatrove
in docs/CPU-s, so above 1 means ours is faster. MB is 10^6 bytes of UTF-8 HTML.

The last line printed is one JSON object holding every figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from benchlib.crawls import find_shards, resolve_crawl
from benchlib.timing import Clock, figures, rate, rounded, timed

from lm_assets.corpus.curation.chinese_lexicon import flagged_ratios, lexicon
from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents, extract_html
from lm_assets.corpus.curation.langid import LangIdConfig, bundled_model_path, identify, identify_languages
from lm_assets.corpus.curation.pipeline import CURATION_BATCH_ROWS, CurationConfig, curate, curate_batches
from lm_assets.corpus.curation.rules import apply_rules, preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.ingest.readers import read_shard

# Datatrove's FineWeb order; our quality families are checked in the same order.
QUALITY_ORDER = ("gopher_repetition", "gopher_quality", "c4", "fineweb")
# Ours runs the pipeline's default preset, the rules `curated_shard` applies.
OUR_QUALITY = preset()
LANGUAGES = ["en", "zh"]
WARM_UP_HTML = "<html lang=en><body><p>The warm-up page has one short paragraph of text.</p></body></html>"
WARM_UP_TEXT = "The warm-up text. It has two sentences and a few words in it."


# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------


@dataclass
class Selection:
    """The HTML records both sides extract, and the shards they come from."""

    docs: pl.DataFrame  # our reader's rows: doc_id, source, record_index, url, html, ...
    shards: list[Path]

    def keys(self) -> dict[str, str]:
        """`shard#record_index` -> url."""
        rows = self.docs.select("source", "record_index", "url").iter_rows()
        return {record_key(source, index): url for source, index, url in rows}

    def html_mb(self) -> float:
        return sum(len(html.encode()) for html in self.docs["html"]) / 1e6


def record_key(shard_name: str, record_index: int) -> str:
    return f"{shard_name}#{record_index}"


def our_read(shards: list[Path], max_docs: int | None) -> tuple[Selection, Clock]:
    """Read shards in order until `max_docs` HTML documents are in hand."""
    clock, frames, used, count = Clock(), [], [], 0
    with timed(clock):
        for shard in shards:
            documents = read_shard(shard).documents.filter(pl.col("html").is_not_null())
            frames.append(documents)
            used.append(shard)
            count += documents.height
            if max_docs is not None and count >= max_docs:
                break
    docs = pl.concat(frames)
    if max_docs is not None:
        docs = docs.head(max_docs)
    return Selection(docs, used), clock


def our_extraction(selection: Selection, read_clock: Clock) -> tuple[pl.DataFrame, dict]:
    clock = Clock()
    with timed(clock):
        result = extract_documents(selection.docs, ExtractConfig())
    kept = result.kept
    stage = figures(
        selection.docs.height,
        read_clock + clock,
        read=figures(selection.docs.height, read_clock),
        extract=figures(selection.docs.height, clock),
        docs_with_text=kept.height,
        text_chars=int(kept["text"].str.len_chars().sum()),
    )
    return kept, stage


def _keyed_adapter(self, data: dict, path: str, id_in_file: int) -> dict:
    """Datatrove reader adapter: the document id is `shard#record_index`, as our reader counts records."""
    return {
        "text": data["text"],
        "id": record_key(Path(path).name, id_in_file),
        "metadata": {"url": data.get("url"), "date": data.get("date")},
    }


def datatrove_read(crawl: Path, selection: Selection) -> tuple[list, Clock, dict]:
    """Datatrove's WarcReader over the same shards; keep the records our reader selected."""
    from datatrove.pipeline.readers import WarcReader

    reader = WarcReader(str(crawl), adapter=_keyed_adapter)
    clock = Clock()
    with timed(clock):
        records = [doc for shard in selection.shards for doc in reader.read_file(shard.name)]
    wanted = selection.keys()
    chosen = [doc for doc in records if doc.id in wanted]
    matching = {
        "reader_docs": len(records),
        "read_not_extracted": len(records) - len(chosen),
        "selected_missing": len(wanted) - len(chosen),
        "url_mismatches": sum(1 for doc in chosen if doc.metadata.get("url") != wanted[doc.id]),
    }
    return chosen, clock, matching


def trafilatura_extract_all(extractor, docs: list) -> tuple[list, int]:
    """What `BaseExtractor.run` does per document, minus the sandbox subprocess: each document's text becomes
    the extracted text; errors and empty texts are dropped. Returns the documents it forwards."""
    forwarded, errors = [], 0
    for doc in docs:
        try:
            text = extractor.extract(doc.text)
        except Exception:  # noqa: BLE001 - datatrove counts and skips any extractor error
            errors += 1
            continue
        if text:
            doc.text = text
            forwarded.append(doc)
    return forwarded, errors


def datatrove_extraction(crawl: Path, selection: Selection) -> tuple[list, dict]:
    """Datatrove's reader and Trafilatura; returns the documents with text and the figures."""
    from datatrove.pipeline.extractors import Trafilatura

    docs, read_clock, matching = datatrove_read(crawl, selection)
    extractor = Trafilatura()
    extractor.extract(WARM_UP_HTML)
    clock = Clock()
    with timed(clock):
        extracted, errors = trafilatura_extract_all(extractor, docs)
    return extracted, figures(
        len(docs),
        read_clock + clock,
        read=figures(len(docs), read_clock),
        extract=figures(len(docs), clock),
        docs_with_text=len(extracted),
        errors=errors,
        text_chars=sum(len(doc.text) for doc in extracted),
        **matching,
    )


# ---------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------


def our_filters(extracted: pl.DataFrame) -> tuple[dict, dict[str, str]]:
    """Language ID then the quality rules. Returns the figures and each input document's language."""
    lid_clock, quality_clock = Clock(), Clock()
    with timed(lid_clock):
        lid = identify_languages(extracted, LangIdConfig())
    with timed(quality_clock):
        quality = apply_rules(lid.kept, OUR_QUALITY)
    languages = dict.fromkeys(extracted["doc_id"].to_list(), "other")
    languages.update(zip(lid.kept["doc_id"].to_list(), lid.kept["lang"].to_list(), strict=True))
    dropped = Counter(reason.split(":")[0] for reason in quality.dropped["reason"])
    steps = survivors(lid.kept.height, [(family, dropped[family]) for family in OUR_QUALITY.families])
    stage = figures(
        extracted.height,
        lid_clock + quality_clock,
        kept=quality.kept.height,
        langid=figures(extracted.height, lid_clock, kept=lid.kept.height),
        quality=figures(lid.kept.height, quality_clock, kept=quality.kept.height),
        kept_after=[("langid", lid.kept.height), *steps],
        kept_by_language=by_language(quality.kept["doc_id"].to_list(), languages),
    )
    return stage, languages


def survivors(start: int, drops: list[tuple[str, int]]) -> list[tuple[str, int]]:
    out, left = [], start
    for name, count in drops:
        left -= count
        out.append((name, left))
    return out


def by_language(doc_ids, languages: dict[str, str]) -> dict[str, int]:
    return dict(Counter(languages[doc_id] for doc_id in doc_ids).most_common())


def datatrove_tokenizer(choice: str):
    """The word tokenizer datatrove's English filters use: its own (spaCy blank "en"), or an offline NLTK one."""
    if choice == "spacy" or (choice == "auto" and importlib.util.find_spec("spacy")):
        return "en", 'spaCy blank "en" (datatrove\'s English default; no model download)'
    return offline_nltk_tokenizer(), "NLTK word tokenizer + untrained Punkt sentences (no nltk data needed)"


def offline_nltk_tokenizer():
    from datatrove.utils.word_tokenizers import WordTokenizer, strip_strings
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    class OfflineNLTKTokenizer(WordTokenizer):
        """NLTK's Treebank-style word tokenizer and a Punkt sentence splitter with default parameters."""

        def __init__(self):
            super().__init__("en")
            self.words, self.sentences = NLTKWordTokenizer(), PunktSentenceTokenizer()

        def word_tokenize(self, text: str) -> list[str]:
            return strip_strings(self.words.tokenize(text))

        def sent_tokenize(self, text: str) -> list[str]:
            return strip_strings(self.sentences.tokenize(text))

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return list(self.sentences.span_tokenize(text))

    return OfflineNLTKTokenizer()


def datatrove_language_filter() -> tuple[object, str]:
    """Datatrove's LanguageFilter (en, zh). It would download lid.176.bin on first use; the bench downloads
    nothing, so its model is given the quantized lid.176.ftz our language ID loads (same labels)."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import LanguageFilter
    from fasttext.FastText import _FastText

    language_filter = LanguageFilter(languages=LANGUAGES)
    language_filter.model._model = _FastText(str(bundled_model_path()))
    language_filter.filter(Document(text=WARM_UP_TEXT, id="warm-up"))
    return language_filter, f"used, with {bundled_model_path().name} in place of the lid.176.bin it downloads"


def datatrove_filter_steps(language, language_filter) -> list:
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    steps = [
        GopherRepetitionFilter(language=language),
        GopherQualityFilter(language=language),
        C4QualityFilter(language=language),
        FineWebQualityFilter(language=language),
    ]
    return ([language_filter] if language_filter is not None else []) + steps


def warm_up_datatrove_tokenizer(language) -> None:
    from datatrove.utils.text import split_into_sentences, split_into_words

    split_into_words(WARM_UP_TEXT, language)
    split_into_sentences(WARM_UP_TEXT, language)


def run_datatrove_steps(steps: list, docs: list) -> tuple[list, Clock]:
    """The steps chained as generators, exactly as a datatrove pipeline runs them; the documents out, timed."""
    clock = Clock()
    with timed(clock):
        stream = iter(docs)
        for step in steps:
            stream = step.run(stream, rank=0, world_size=1)
        out = list(stream)
    return out, clock


def datatrove_filters(extracted: pl.DataFrame, languages: dict[str, str], tokenizer_choice: str) -> dict:
    from datatrove.data import Document

    language, tokenizer_name = datatrove_tokenizer(tokenizer_choice)
    language_filter, language_filter_status = datatrove_language_filter()
    warm_up_datatrove_tokenizer(language)
    steps = datatrove_filter_steps(language, language_filter)
    docs = [Document(text=text, id=doc_id) for doc_id, text in extracted.select("doc_id", "text").iter_rows()]
    kept, clock = run_datatrove_steps(steps, docs)
    kept = [doc.id for doc in kept]
    per_step = [step_figures(step) for step in steps]
    return figures(
        len(docs),
        clock,
        kept=len(kept),
        kept_after=[(s["step"], s["kept"]) for s in per_step],
        steps=per_step,
        kept_by_language=by_language(kept, languages),
        tokenizer=tokenizer_name,
        language_filter=language_filter_status,
    )


def step_figures(step) -> dict:
    """Kept count, drop reasons and wall time that a datatrove step recorded in its own stats."""
    stats = step.stats.stats
    reasons = {name.removeprefix("dropped_"): int(s.total) for name, s in stats.items() if name.startswith("dropped_")}
    return {
        "step": type(step).__name__,
        # A formatter (PIIFormatter) forwards every document it sees and counts them as `total`.
        "kept": int(stats["forwarded"].total if "forwarded" in stats else stats["total"].total),
        "dropped": int(stats["dropped"].total) if "dropped" in stats else 0,
        "wall_s": round(step.stats.time_stats.total, 3),
        "dropped_by_reason": reasons,
    }


# ---------------------------------------------------------------------------------------------
# The whole path
# ---------------------------------------------------------------------------------------------


def our_curation(extracted: pl.DataFrame, ours_extraction: dict, toxicity_backend: str) -> dict:
    """`curate` with `curated_shard`'s defaults on our extracted documents; the whole path is read +
    extraction (1.) + this."""
    config = CurationConfig(toxicity=ToxicityConfig(backend=toxicity_backend))
    # Loads, once a process, the shipped classifier, the toxicity model and the Chinese lexicon's segmenter
    # (jieba's dictionary, which it loads at the first Chinese text that holds a listed term).
    curate(extracted.head(2), config)
    flagged_ratios(["这篇文章讨论了" + min(lexicon().terms) + "这个词在网络上的用法。"])
    clock = Clock()
    with timed(clock):
        result = curate_batches(extracted.iter_slices(CURATION_BATCH_ROWS), config)
    steps = {name: stats["seconds"] for name, stats in result.stats.items()}
    step_total = sum(steps.values())
    whole = Clock(ours_extraction["cpu_s"] + clock.cpu_s, ours_extraction["wall_s"] + clock.wall_s)
    return figures(
        ours_extraction["docs"], whole,
        curate=figures(extracted.height, clock, kept=result.kept.height),
        kept=result.kept.height,
        step_seconds={name: round(value, 3) for name, value in steps.items()},
        step_share={name: round(value / step_total, 3) if step_total else 0.0 for name, value in steps.items()},
        policy=config.policy, toxicity_backend=toxicity_backend,
    )


def datatrove_whole(trafilatura_docs: list, dt_extraction: dict, tokenizer_choice: str) -> dict:
    """Datatrove's FineWeb pipeline after extraction, on Trafilatura's own documents: the language filter,
    the Gopher, C4 and FineWeb filters, then PII formatting."""
    from datatrove.pipeline.formatters import PIIFormatter

    language, _ = datatrove_tokenizer(tokenizer_choice)
    language_filter, _ = datatrove_language_filter()
    steps = [*datatrove_filter_steps(language, language_filter), PIIFormatter()]
    kept, clock = run_datatrove_steps(steps, trafilatura_docs)
    whole = Clock(dt_extraction["cpu_s"] + clock.cpu_s, dt_extraction["wall_s"] + clock.wall_s)
    return figures(
        dt_extraction["docs"], whole,
        after_extraction=figures(len(trafilatura_docs), clock, kept=len(kept)),
        kept=len(kept),
        steps=[step_figures(step) for step in steps],
    )


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def warm_up_ours() -> None:
    extract_html(WARM_UP_HTML, ExtractConfig())
    identify([WARM_UP_TEXT], LangIdConfig())


def quiet_datatrove_logs() -> None:
    """Warnings and errors only: datatrove installs its own stderr handler when first imported."""
    from datatrove.utils.logging import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")


def compare(ours: dict, theirs: dict) -> dict:
    ratio = None
    if ours["docs_per_cpu_s"] and theirs["docs_per_cpu_s"]:
        ratio = round(ours["docs_per_cpu_s"] / theirs["docs_per_cpu_s"], 2)
    return {"ours": ours, "datatrove": theirs, "ratio_ours_over_datatrove": ratio}


def total(extraction: dict, filters: dict) -> dict:
    clock = Clock(extraction["cpu_s"] + filters["cpu_s"], extraction["wall_s"] + filters["wall_s"])
    return figures(extraction["docs"], clock)


def print_table(stages: dict[str, dict]) -> None:
    header = f"{'stage':<20} {'side':<10} {'docs':>6} {'CPU s':>9} {'wall s':>9} {'docs/CPU-s':>11} {'ours/dt':>8}"
    print(header)
    print("-" * len(header))
    for name, stage in stages.items():
        for side in ("ours", "datatrove"):
            row = stage[side]
            ratio = stage["ratio_ours_over_datatrove"] if side == "ours" else None
            ratio = f"{ratio:.2f}" if ratio else ""
            label = name if side == "ours" else ""
            print(
                f"{label:<20} {side:<10} {row['docs']:>6} {row['cpu_s']:>9.2f} {row['wall_s']:>9.2f} "
                f"{row['docs_per_cpu_s'] or 0:>11.1f} {ratio:>8}"
            )
    print("ours/dt: our docs/CPU-s divided by datatrove's (above 1: ours is faster)")


def print_details(report: dict) -> None:
    extraction, filters = report["extraction"], report["filters"]
    ours_x, dt_x = extraction["ours"], extraction["datatrove"]
    print()
    print("extraction details")
    for side, row in (("ours", ours_x), ("datatrove", dt_x)):
        print(
            f"  {side:<10} read {row['read']['cpu_s']:.2f} CPU-s, extract {row['extract']['cpu_s']:.2f} CPU-s; "
            f"{row['docs_with_text']} docs with text, {row['text_chars']:,} chars"
        )
    print(
        f"  datatrove reader yielded {dt_x['reader_docs']} docs: {dt_x['read_not_extracted']} not in our selection "
        f"(read, not extracted), {dt_x['selected_missing']} of ours missing, "
        f"{dt_x['url_mismatches']} URL mismatches; "
        f"{dt_x['errors']} extraction errors"
    )
    print()
    print("filter details")
    ours_f, dt_f = filters["ours"], filters["datatrove"]
    print(
        f"  ours       langid {ours_f['langid']['cpu_s']:.2f} CPU-s, "
        f"quality rules {ours_f['quality']['cpu_s']:.2f} CPU-s"
    )
    print(f"  ours       kept {ours_f['kept']} of {ours_f['docs']}; after each step: {_steps(ours_f['kept_after'])}")
    print(f"  datatrove  kept {dt_f['kept']} of {dt_f['docs']}; after each step: {_steps(dt_f['kept_after'])}")
    print(f"  kept by language (our langid): ours {ours_f['kept_by_language']}, datatrove {dt_f['kept_by_language']}")
    print(f"  datatrove LanguageFilter: {dt_f['language_filter']}")
    print(f"  datatrove word tokenizer: {dt_f['tokenizer']}; filters run with language=en on every document")
    for step in dt_f["steps"]:
        print(
            f"    {step['step']:<24} kept {step['kept']:>5}, {step['wall_s']:.2f} wall-s (its own stats), "
            f"dropped {step['dropped_by_reason']}"
        )
    print()
    html_mb = report["html_mb"]
    for side in ("ours", "datatrove"):
        print(
            f"extraction+filters, {side}: {report['html_mb_per_cpu_s'][side]:.2f} MB of HTML per CPU-s "
            f"({html_mb:.1f} MB in {report['total'][side]['cpu_s']:.2f} CPU-s)"
        )


def print_whole_path(report: dict) -> None:
    ours, theirs = report["whole_path"]["ours"], report["whole_path"]["datatrove"]
    print()
    print("raw -> curated, the whole path")
    print(f"  ours       kept {ours['kept']} of {ours['docs']} (policy {ours['policy']}, toxicity {ours['toxicity_backend']}); "
          f"curation {ours['curate']['cpu_s']:.2f} CPU-s; share of curation by step: "
          + ", ".join(f"{name} {share:.1%}" for name, share in ours["step_share"].items()))
    print(f"  datatrove  kept {theirs['kept']} of {theirs['docs']}; after extraction "
          f"{theirs['after_extraction']['cpu_s']:.2f} CPU-s: "
          + ", ".join(f"{step['step']} {step['kept']}" for step in theirs["steps"]))
    for side in ("ours", "datatrove"):
        print(f"  {side:<10} {report['whole_path_html_mb_per_cpu_s'][side]:.2f} MB of HTML per CPU-s "
              f"({report['html_mb']:.1f} MB in {report['whole_path'][side]['cpu_s']:.2f} CPU-s)")


def _steps(pairs) -> str:
    return ", ".join(f"{name} {count}" for name, count in pairs)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--crawl", type=Path, help="a crawl folder (default: the development crawl, built in $OUT/dev-crawl when missing)")
    parser.add_argument("--max-docs", type=int, help="extract at most this many HTML records (in shard order)")
    parser.add_argument("--smoke", action="store_true", help="seconds, offline: 20 documents of the test slice")
    parser.add_argument("--toxicity", default="profanity_check",
                        help="our toxicity backend on the whole path (profanity_check: offline; detoxify needs its checkpoint)")
    parser.add_argument(
        "--dt-tokenizer",
        choices=("auto", "spacy", "nltk"),
        default="auto",
        help="word tokenizer for datatrove's filters (auto: spaCy if installed, else offline NLTK)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.max_docs = 20
    if args.max_docs is not None and args.max_docs < 1:
        parser.error("--max-docs must be at least 1")
    return args


def run(args: argparse.Namespace) -> dict:
    crawl = resolve_crawl(args)
    quiet_datatrove_logs()
    warm_up_ours()

    selection, read_clock = our_read(find_shards(crawl), args.max_docs)
    if selection.docs.height == 0:
        raise RuntimeError(f"no HTML documents in {crawl}")
    print(
        f"crawl {crawl}: {selection.docs.height} HTML records from {len(selection.shards)} shard(s), "
        f"{selection.html_mb():.1f} MB of HTML",
        flush=True,
    )

    extracted, ours_extraction = our_extraction(selection, read_clock)
    print("extraction: ours done; datatrove (trafilatura) running...", flush=True)
    trafilatura_docs, dt_extraction = datatrove_extraction(crawl, selection)
    print(f"filters on {extracted.height} texts: ours running...", flush=True)
    ours_filters, languages = our_filters(extracted)
    print("filters: datatrove running...", flush=True)
    dt_filters = datatrove_filters(extracted, languages, args.dt_tokenizer)
    print("whole path: our curation running...", flush=True)
    ours_whole = our_curation(extracted, ours_extraction, args.toxicity)
    print("whole path: datatrove's FineWeb pipeline after extraction running...", flush=True)
    dt_whole = datatrove_whole(trafilatura_docs, dt_extraction, args.dt_tokenizer)

    html_mb = selection.html_mb()
    report = {
        "crawl": str(crawl),
        "shards": [shard.name for shard in selection.shards],
        "html_docs": selection.docs.height,
        "html_mb": round(html_mb, 3),
        "extraction": compare(ours_extraction, dt_extraction),
        "filters": compare(ours_filters, dt_filters),
        "total": compare(total(ours_extraction, ours_filters), total(dt_extraction, dt_filters)),
        "whole_path": compare(ours_whole, dt_whole),
    }
    for name, key in (("html_mb_per_cpu_s", "total"), ("whole_path_html_mb_per_cpu_s", "whole_path")):
        report[name] = {side: rounded(rate(html_mb, report[key][side]["cpu_s"]), 3) for side in ("ours", "datatrove")}
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        report = run(args)
    except RuntimeError as exc:
        print(f"bench/curation.py: {exc}", file=sys.stderr)
        return 2
    print()
    print_table(
        {"extraction": report["extraction"], "filters": report["filters"], "extraction+filters": report["total"],
         "raw -> curated": report["whole_path"]}
    )
    print_details(report)
    print_whole_path(report)
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
