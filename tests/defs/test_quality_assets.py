"""The label → train → curate loop as assets, on the 50 labelled pages of the development slice."""

import json
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from lm_assets.corpus.audit.agreement import read_labels
from lm_assets.corpus.quality.shipped import shipped_classifier, training_pages
from lm_assets.defs.automation import stale_shards
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import curated_shard, curated_with_current_classifier, extracted_shard
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.defs.quality.assets import quality_classifier, quality_labels
from lm_assets.storage.layout import CURRENT_CLASSIFIER, curation_record_key, stage_keys
from lm_assets.storage.store import Storage

SLICE = Path(__file__).resolve().parents[1] / "data" / "dev-slice"
SHARD = "slice.warc.gz"
# The offline toxicity model: Detoxify would download its release model.
OFFLINE_TOXICITY = ToxicityResource(backend="profanity_check")


def check_results(result) -> dict:
    return {
        (e.asset_key.path[-1], e.check_name): e.passed
        for e in (ev.event_specific_data for ev in result.all_events if ev.event_type_value == "ASSET_CHECK_EVALUATION")
    }


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """Extract the slice, label it (plus two labels that match nothing), train, and curate with the classifier."""
    root = tmp_path_factory.mktemp("loop")
    landing, storage = root / "landing", root / "storage"
    landing.mkdir()
    shutil.copy(SLICE / SHARD, landing / SHARD)
    (storage / "labels").mkdir(parents=True)
    labels = (SLICE / "labels.jsonl").read_text()
    extra = [{"url": "https://nowhere.example/gone", "label": "KEEP", "source": "human"}, {"doc_id": "no-such-doc", "label": 1}]
    (storage / "labels" / "slice.jsonl").write_text(labels + "".join(json.dumps(e) + "\n" for e in extra) + "{broken\n")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", [SHARD])
    s3 = s3_resource_from_env()
    resources = {"storage": StorageResource(root=str(storage), s3=s3), "landing": LandingResource(root=str(landing), s3=s3),
                 "toxicity": OFFLINE_TOXICITY}
    common = dict(instance=instance, resources=resources, raise_on_error=False)
    ingest = dg.materialize([raw_shard, extracted_shard], partition_key=SHARD, **common)
    trained = dg.materialize(
        [quality_labels, quality_classifier], run_config={"ops": {"quality_classifier": {"config": {"min_balanced_accuracy": 0.5}}}},
        **common,
    )
    curated = dg.materialize(
        [curated_shard], partition_key=SHARD, run_config={"ops": {"curated_shard": {"config": {"quality_policy": "classifier"}}}},
        **common,
    )
    assert ingest.success and trained.success and curated.success
    return {"storage": storage, "instance": instance, "resources": resources, "trained": trained, "curated": curated}


def test_labels_are_joined_and_unmatched_or_broken_lines_reported(loop):
    meta = loop["trained"].asset_materializations_for_node("quality_labels")[0].metadata
    assert meta["examples"].value == 50 and meta["by_label"].value == {"KEEP": 30, "DROP": 20}
    assert meta["unmatched"].value == 2 and "https://nowhere.example/gone" in meta["unmatched_labels"].value
    assert meta["rejected_lines"].value == 1


def test_the_classifier_is_trained_on_the_shipped_pages_plus_the_users_and_made_current(loop):
    meta = loop["trained"].asset_materializations_for_node("quality_classifier")[0].metadata
    shipped = training_pages()
    # The slice's pages are among the shipped ones: the user's label replaces the shipped page of its URL.
    slice_urls = set(read_labels(SLICE / "labels.jsonl")["url"])
    expected = shipped.filter(~pl.col("url").is_in(list(slice_urls))).height + 50
    assert meta["n_test"].value + meta["n_train"].value == expected
    assert meta["trained_on"].value == {"your labelled pages": 50, "shipped labelled pages": expected - 50}
    # Source-out beside by site, per labelled set and language (the user's labels are a source of their own).
    table = meta["source_out_vs_by_site"].value
    for row in ("| all |", "| en |", "| zh |", "| set user |", "| set web, zh |"):
        assert row in table, row
    assert 0.5 <= meta["source_out_balanced_accuracy"].value <= meta["by_site_balanced_accuracy"].value + 0.1
    assert "| en | 0.0-0.1 |" in meta["reliability"].value or "| en | 0.1-0.2 |" in meta["reliability"].value
    assert 0.5 <= meta["balanced_accuracy"].value <= 1.0 and meta["current"].value is True
    assert "predicted KEEP" in meta["confusion_matrix"].value and meta["threshold_reason"].value
    assert check_results(loop["trained"])[("quality_classifier", "held_back_balanced_accuracy")]
    store = Storage(str(loop["storage"]))
    assert json.loads(store.read_bytes(CURRENT_CLASSIFIER))["hash"] == meta["classifier_hash"].value


def test_curation_with_the_classifier_accounts_for_every_document(loop):
    result = loop["curated"]
    checks = check_results(result)
    assert checks[("curated_shard", "conservation")] and checks[("curated_shard", "shard_conservation")]
    store = Storage(str(loop["storage"]))
    kept = store.read_parquet(stage_keys("curated", "slice.warc.gz")["documents"])
    dropped = store.read_parquet(stage_keys("curated", "slice.warc.gz")["dropped"])
    assert kept["quality_score"].is_between(0, 1).all()
    classifier_drops = dropped.filter(pl.col("stage") == "classifier")
    assert classifier_drops.height > 0 and (classifier_drops["reason"] == "below_threshold").all()
    assert classifier_drops["score"].is_not_null().all()
    meta = result.asset_materializations_for_node("curated_shard")[0].metadata
    assert meta["quality_policy"].value == "classifier"
    assert meta["dropped/classifier:below_threshold"].value == classifier_drops.height
    shown = dict(part.rsplit(" ", 1) for part in meta["classifier_threshold"].value.split(", "))
    assert "others" in shown and len(shown) > 1  # every language's cut, not only the others'
    assert "rules_drop_classifier_keeps" in meta and "disagreements" in meta
    # The disagreements to read, as a list whose quoted openings wrap in the cell.
    disagreeing = meta["rules_drop_classifier_keeps"].value + meta["classifier_drops_rules_keep"].value
    items = [line for line in meta["disagreements"].value.splitlines() if line.startswith("- rules **")]
    assert (0 < len(items) <= disagreeing) if disagreeing else meta["disagreements"].value == "_none_"
    assert meta["disagreements"].value.count("\n  > ") == len(items)


def test_a_shard_scored_by_an_older_classifier_is_stale(loop):
    store = Storage(str(loop["storage"]))
    instance, resources = loop["instance"], loop["resources"]
    assert stale_shards(instance, [SHARD], current_hashes={}, store=store) == []
    current = store.read_bytes(CURRENT_CLASSIFIER)
    store.write_bytes(CURRENT_CLASSIFIER, json.dumps({"hash": "0" * 16}).encode())
    try:
        assert stale_shards(instance, [SHARD], current_hashes={}, store=store) == [SHARD]
        result = dg.materialize([curated_with_current_classifier], instance=instance, resources=resources,
                                selection=dg.AssetSelection.checks(curated_with_current_classifier))
        evaluation = next(e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
        assert not evaluation.passed and evaluation.metadata["stale"].value == [SHARD]
    finally:
        store.write_bytes(CURRENT_CLASSIFIER, current)


def test_an_unlabelled_crawl_runs_with_every_default_on_the_shipped_classifier(tmp_path, monkeypatch):
    """No label files, the default policy (classifier): quality_labels reports that no labels exist,
    quality_classifier makes the shipped classifier current, and curated_shard decides with it."""
    monkeypatch.delenv("LM_ASSETS_QUALITY_POLICY", raising=False)
    shutil.copy(SLICE / SHARD, tmp_path / SHARD)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", [SHARD])
    s3 = s3_resource_from_env()
    resources = {"storage": StorageResource(root=str(tmp_path / "storage"), s3=s3), "landing": LandingResource(root=str(tmp_path), s3=s3),
                 "toxicity": OFFLINE_TOXICITY}
    common = dict(instance=instance, resources=resources, raise_on_error=False)
    ingest = dg.materialize([raw_shard, extracted_shard], partition_key=SHARD, **common)
    curated = dg.materialize([curated_shard], partition_key=SHARD, **common)
    labels = dg.materialize([quality_labels, quality_classifier], **common)
    assert ingest.success and curated.success and labels.success
    shipped, info = shipped_classifier()
    meta = curated.asset_materializations_for_node("curated_shard")[0].metadata
    assert meta["quality_policy"].value == "classifier" and meta["classifier_hash"].value == shipped.hash
    assert meta["classifier"].value.startswith(f"shipped {shipped.hash}")
    assert check_results(curated)[("curated_shard", "shard_conservation")]
    store = Storage(str(tmp_path / "storage"))
    record = json.loads(store.read_bytes(curation_record_key(SHARD)))
    assert record == {"policy": "classifier", "classifier_hash": shipped.hash, "classifier_origin": "shipped"}
    labels_meta = labels.asset_materializations_for_node("quality_labels")[0].metadata
    assert labels_meta["examples"].value == 0 and labels_meta["labels_version"].value == "no-labels"
    assert f"uses the shipped classifier {shipped.hash}" in labels_meta["classifier_in_use"].value
    classifier_meta = labels.asset_materializations_for_node("quality_classifier")[0].metadata
    assert classifier_meta["origin"].value == "shipped" and classifier_meta["classifier_hash"].value == shipped.hash
    assert classifier_meta["balanced_accuracy"].value == info["metrics"]["cross_validated"]["balanced_accuracy"]
    assert check_results(labels)[("quality_classifier", "held_back_balanced_accuracy")]
    assert stale_shards(instance, [SHARD], current_hashes={}, store=store) == []
