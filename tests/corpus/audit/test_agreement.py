"""Curation decisions on a slice of the labelled development set (bench/dev_set), held to bars a
little below the figures measured when the slice was made, so that a regression fails."""

from pathlib import Path

import polars as pl
import pytest

from lm_assets.corpus.audit.agreement import decision_figures, decisions, outcomes, read_labels, text_integrity
from lm_assets.corpus.curation.extract import extract_documents
from lm_assets.corpus.curation.pipeline import CurationConfig, curate
from lm_assets.corpus.curation.rules import preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.ingest.readers import read_shard

SLICE = Path(__file__).resolve().parents[2] / "data" / "dev-slice"


def run_slice(quality=None):
    raw = read_shard(SLICE / "slice.warc.gz")
    extracted = extract_documents(raw.documents)
    config = CurationConfig(toxicity=ToxicityConfig(backend="profanity_check"), policy="rules")
    if quality is not None:
        config.quality = quality
    curated = curate(extracted.kept, config)
    outcome = outcomes(
        raw.documents, pl.concat([raw.dropped, extracted.dropped, curated.dropped.select(raw.dropped.columns)]), raw.quarantine, curated.kept
    )
    return decisions(read_labels(SLICE / "labels.jsonl"), outcome), extracted.kept, curated.kept


@pytest.fixture(scope="module")
def slice_run():
    return run_slice()


def test_the_slice_is_50_labelled_pages(slice_run):
    table, _, _ = slice_run
    assert table.height == 50 and table["found"].all()
    assert table.group_by("label").len().sort("label").rows() == [("DROP", 20), ("KEEP", 30)]


def test_default_decisions_hold_their_measured_bars(slice_run):
    figures = decision_figures(slice_run[0])
    # Measured on this slice: good retention 1.0, junk rejection 0.8, balanced accuracy 0.9.
    assert figures["good_retention"] >= 0.96
    assert figures["junk_rejection"] >= 0.75
    assert figures["balanced_accuracy"] >= 0.87


def test_the_published_presets_lose_good_pages_here_but_keep_structure():
    table, extracted, curated = run_slice(preset("published"))
    published = decision_figures(table)
    assert published["good_retention"] <= 0.85
    # C4's line filter removes lines but leaves the paragraphs of what it keeps.
    assert text_integrity(extracted, curated)["still_have_paragraphs"] == 1.0


def test_curation_keeps_paragraphs_and_code(slice_run):
    _, extracted, curated = slice_run
    integrity = text_integrity(extracted, curated)
    assert integrity["had_paragraphs"] >= 20
    assert integrity["still_have_paragraphs"] == 1.0
    assert integrity["chars_removed_share"] < 0.01
