"""The extracted, language-identified documents of a crawl, as the dedup and token benches read them, and
labelled pages as the text path reads them."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
from lm_assets.corpus.curation.langid import LangIdConfig, identify_languages
from lm_assets.corpus.ingest.readers import read_shard

from .crawls import find_shards


def load_documents(crawl: Path, max_docs: int, doc_bytes: int | None = None) -> pl.DataFrame:
    """Extracted, language-identified documents of the crawl's shards, in order, at most `max_docs`.
    With `doc_bytes`, only documents of at least that many UTF-8 bytes, each cut to that size (at a
    character boundary): a fixed document size to compare throughput figures at."""
    frames, count = [], 0
    for shard in find_shards(crawl):
        html = read_shard(shard).documents.filter(pl.col("html").is_not_null())
        kept = identify_languages(extract_documents(html, ExtractConfig()).kept, LangIdConfig()).kept
        if doc_bytes:
            kept = kept.filter(pl.col("text").str.len_bytes() >= doc_bytes).with_columns(
                pl.col("text").map_elements(lambda t: t.encode()[:doc_bytes].decode(errors="ignore"), pl.String)
            )
        frames.append(kept.select("doc_id", "text", "lang", "fetched_at"))
        count += kept.height
        if count >= max_docs:
            break
    if not frames:
        raise RuntimeError(f"no documents in {crawl}")
    return pl.concat(frames).head(max_docs)


def text_mb(texts: list[str]) -> float:
    return sum(len(text.encode()) for text in texts) / 1e6


def as_text_documents(pages: pl.DataFrame) -> pl.DataFrame:
    """Pages as the text path reads them: each page's extracted text as a JSON Lines document, without HTML,
    so without the signals only HTML gives (`q_html_*`, `q_title_*`); the URL's are kept, as text shards carry it."""
    return pages.with_columns([pl.lit(None, dtype=pages.schema[name]).alias(name)
                               for name in pages.columns if name.startswith(("q_html_", "q_title_"))])
