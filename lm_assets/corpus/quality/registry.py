"""Which quality classifier is current in a storage root: the one trained on its labels when one was
made current (`quality/classifier/current.json`), else the shipped one; and the curated shards an
older classifier scored."""

from __future__ import annotations

import json

from lm_assets.corpus.quality.classifier import QualityClassifier
from lm_assets.corpus.quality.shipped import shipped_classifier
from lm_assets.storage.layout import CURRENT_CLASSIFIER, classifier_keys, curation_record_key, stage_keys


def current_record(store) -> dict:
    """`quality/classifier/current.json`: the hash of the classifier trained on this storage's labels, or
    `{"shipped": true}` (also when none has been written)."""
    return json.loads(store.read_bytes(CURRENT_CLASSIFIER)) if store.exists(CURRENT_CLASSIFIER) else {"shipped": True}


def current_classifier(store) -> tuple[QualityClassifier, dict]:
    """The current classifier and its record: the one trained on this storage's labels when one was made
    current, else the shipped one (its record says `"origin": "shipped"`)."""
    record = current_record(store)
    if record.get("shipped"):
        classifier, info = shipped_classifier()
        return classifier, {**info, "origin": "shipped"}
    keys = classifier_keys(record["hash"])
    info = json.loads(store.read_bytes(keys["info"]))
    return QualityClassifier.from_bytes(store.read_bytes(keys["model"])), {**info, "origin": "trained"}


def current_classifier_hash(store) -> str:
    record = current_record(store)
    return shipped_classifier()[0].hash if record.get("shipped") else record["hash"]


def classifier_description(info: dict) -> str:
    """Which classifier scored the shard, as its metadata says it."""
    if info["origin"] == "shipped":
        return f"shipped {info['hash']} (trained on the {info['pages']} labelled pages the package ships)"
    return f"trained {info['hash']} on this storage's labels (version {info.get('labels_version')})"


def curation_record(store, shard: str) -> dict | None:
    key = curation_record_key(shard)
    return json.loads(store.read_bytes(key)) if store.exists(key) else None


def classifier_stale_shards(store, shards: list[str]) -> list[str]:
    """Curated shards scored by another classifier than the current one (or by none)."""
    current = current_classifier_hash(store)
    records = {s: curation_record(store, s) for s in shards if store.exists(stage_keys("curated", s)["documents"])}
    return [s for s, record in records.items() if not record or record.get("classifier_hash") != current]
