"""The shipped quality classifier and its training pages (lm_assets/quality_model/)."""

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.audit.agreement import read_labels
from lm_assets.corpus.quality import shipped as quality_model
from lm_assets.corpus.quality.classifier import ClassifierConfig, sites, train_classifier

SLICE = Path(__file__).resolve().parents[2] / "data" / "dev-slice"


@pytest.fixture(scope="module")
def pages() -> pl.DataFrame:
    return quality_model.training_pages()


def test_the_build_is_deterministic_and_gives_the_shipped_classifier(pages):
    classifier, info = quality_model.shipped_classifier()
    rebuilt = quality_model.build(pages)
    assert rebuilt.hash == classifier.hash == info["hash"]
    assert info["training_pages_hash"] == quality_model.pages_hash(pages) and info["pages"] == pages.height


def test_the_training_pages_ship_tokens_and_signals_but_no_text(pages):
    assert not {"text", "html", "title"} & set(pages.columns)
    assert pages.schema["tokens"] == pl.List(pl.UInt32) and pages["tokens"].list.len().min() > 0
    assert set(pages["label_set"]) == {"dev", "text", "transfer", "web"}
    # The text set: crawled texts without HTML, so no page signal, at least half of them Chinese.
    text = pages.filter(pl.col("label_set") == "text")
    assert text.height >= 400 and text.filter(pl.col("lang") == "zh").height >= text.height / 2
    assert text["q_html_text_ratio"].null_count() == text.height
    assert pages.filter(pl.col("label_set") != "text")["q_html_text_ratio"].null_count() == 0
    web = pages.filter(pl.col("label_set") == "web")
    assert web.height >= 1200 and web["site"].n_unique() >= 800 and (~web["keep"]).mean() >= 0.35
    assert 0.45 * web.height <= web.filter(pl.col("lang") == "zh").height <= 0.6 * web.height
    assert {"q_html_link_share", "q_html_removed_share", "q_url_listing", "q_title_listing", "q_date_line_share"} <= set(pages.columns)


def test_the_stored_pages_are_what_the_pipeline_computes_today(pages):
    """The slice's pages, extracted and compacted now, equal their shipped rows: signals and tokens have not drifted."""
    labels = read_labels(SLICE / "labels.jsonl").with_columns(pl.col("confidence").fill_null("high"))
    fresh = quality_model.compact_pages(quality_model.labelled_examples([SLICE / "slice.warc.gz"], labels), "dev")
    shipped = pages.filter(pl.col("label_set") == "dev").filter(pl.col("url").is_in(fresh["url"].implode()))
    assert shipped.height == fresh.height >= 45
    columns = [c for c in fresh.columns if c not in ("doc_id", "confidence", "site", "collection")]
    left, right = fresh.sort("url").select(columns), shipped.sort("url").select(columns)
    for name in columns:
        if left.schema[name].is_float():
            assert np.allclose(left[name].fill_null(-1).to_numpy(), right[name].fill_null(-1).to_numpy()), name
        else:
            assert left[name].to_list() == right[name].to_list(), name


def test_real_web_pages_of_unseen_sites_on_a_slice(pages):
    """Trained on a third of the web sites alone and cross-validated by site: held above bars a little below
    what this slice measures (415 pages; balanced accuracy en 0.852, zh 0.950; junk rejection 0.870). A site's
    place in the slice follows from its name alone, so pages added to other sites leave the slice as it is.
    On all labelled pages the figures are higher (classifier.json)."""
    web = pages.filter(pl.col("label_set") == "web")
    chosen = [name for name in set(web["site"]) if zlib.crc32(name.encode()) % 3 == 0]
    sample = web.filter(pl.col("site").is_in(chosen))
    assert sample.height == 415
    metrics = train_classifier(sample, ClassifierConfig(test_fraction=0.0, folds=3, folds_by="site")).metrics
    per_language = metrics["cross_validated_by_site"]["per_language"]
    assert per_language["en"]["balanced_accuracy"] >= 0.83 and per_language["zh"]["balanced_accuracy"] >= 0.93
    assert metrics["cross_validated_by_site"]["drop_rejection"] >= 0.85


def test_every_training_page_names_its_source_collection(pages):
    collections = pages.group_by("label_set").agg(pl.col("collection").n_unique()).sort("label_set").rows()
    assert collections == [("dev", 11), ("text", 7), ("transfer", 12), ("web", 9)] and pages["collection"].null_count() == 0
    web = pages.filter(pl.col("label_set") == "web")
    assert web.filter(pl.col("collection") == "blogs")["site"].n_unique() >= 150


def test_a_user_label_replaces_the_shipped_page_of_its_url_and_the_rest_stay(pages):
    shipped = pages.filter(pl.col("label_set") == "dev").head(3)
    user = pl.DataFrame({
        "doc_id": ["u1", "u2"], "url": [shipped["url"][0], "https://mine.example/a"],
        "text": ["A page of mine with three sentences. It explains a thing. It ends here.", "Home | About | Contact"],
        "lang": ["en", "en"], "keep": [False, False],
    })
    combined = quality_model.with_user_examples(user, pages)
    assert combined.height == pages.height - 1 + 2
    mine = combined.filter(pl.col("label_set") == "user").sort("doc_id")
    assert mine["doc_id"].to_list() == ["u1", "u2"] and mine["site"].to_list() == [sites(shipped.head(1))[0], "mine.example"]
    assert mine["collection"].to_list() == ["user", "user"]
    assert combined.filter(pl.col("url") == shipped["url"][0])["keep"].to_list() == [False]


def test_a_shipped_classifier_whose_record_disagrees_is_refused(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(quality_model.SHIPPED_FOLDER, folder)
    info = json.loads((folder / quality_model.INFO_FILE).read_text())
    (folder / quality_model.INFO_FILE).write_text(json.dumps({**info, "hash": "0" * 16}))
    with pytest.raises(ValueError, match="is not the one"):
        quality_model.shipped_classifier.__wrapped__(folder)
    with pytest.raises(FileNotFoundError, match="make quality-model"):
        quality_model.shipped_classifier.__wrapped__(tmp_path / "nowhere")
