"""The storage layout: where every stage keeps its files under the storage root, in one place.

Every asset, the demo, lineage, the CLI, the bench scripts and the tests build keys here and nowhere
else. Keys are relative to a `Storage` root (local folder or S3 prefix); per-shard keys take the
shard's partition key, already checked by `corpus.keys.check_name`. Pure: no Dagster.

    raw/<shard>/{documents,dropped,quarantine}.parquet, summary.json
    <stage>/<shard>/{documents,dropped}.parquet          extracted, curated, deduplicated, decontaminated
    curated/<shard>/curation.json                        who decided quality
    curated/<shard>/effective_config.json                the curation config the run used, whole
    minhash/<shard>/{sketches,bands}.parquet, info.json
    dedup/clusters.parquet, dedup/index.json
    dedup/edges/<band range>.{parquet,json}             verified edges of one band range, and the plan they follow
    tokenizer/tokenizer.model, info.json
    tokenized/<shard>/tokens.bin, index.parquet, tokens.json
    packed/                                              the packed dataset and its manifest.json
    labels/*.jsonl                                       label files a team adds
    quality/labels/…, quality/classifier/<hash>/…, quality/classifier/current.json
    checkpoints/<run>/<tag>/                             partition key `<run>-<tag>`
    evaluation/<checkpoint>/{mmlu,ceval}_questions.parquet, samples.parquet
"""

from __future__ import annotations

import json

from lm_assets.storage.accounting import conservation
from lm_assets.storage.keys import check_checkpoint_key

# The per-shard document stages in order; each drops what the next never sees.
DOCUMENT_STAGES = ("raw", "extracted", "curated", "deduplicated", "decontaminated")


def stage_folder(stage: str, shard: str) -> str:
    return f"{stage}/{shard}"


def stage_keys(stage: str, shard: str) -> dict[str, str]:
    """A document stage's kept and dropped tables."""
    return {t: f"{stage}/{shard}/{t}.parquet" for t in ("documents", "dropped")}


def quarantine_key(stage: str, shard: str) -> str:
    """The records a stage could not process (the reader's unreadable ones, extraction's over its time budget)."""
    return f"{stage}/{shard}/quarantine.parquet"


def raw_keys(shard: str) -> dict[str, str]:
    keys = {t: f"raw/{shard}/{t}.parquet" for t in ("documents", "dropped", "quarantine")}
    return {**keys, "summary": f"raw/{shard}/summary.json"}


def curation_record_key(shard: str) -> str:
    return f"curated/{shard}/curation.json"


def effective_config_key(shard: str) -> str:
    return f"curated/{shard}/effective_config.json"


def minhash_keys(shard: str) -> dict[str, str]:
    return {t: f"minhash/{shard}/{t}.parquet" for t in ("sketches", "bands")} | {"info": f"minhash/{shard}/info.json"}


CLUSTERS_KEY = "dedup/clusters.parquet"
INDEX_KEY = "dedup/index.json"

EDGES_FOLDER = "dedup/edges"


def band_edges_keys(band_key: str) -> dict[str, str]:
    """Verified edges of one band range (its `dedup_edges` partition key) and its info, written last."""
    return {"edges": f"{EDGES_FOLDER}/{band_key}.parquet", "info": f"{EDGES_FOLDER}/{band_key}.json"}


TOKENIZER_KEYS = {"model": "tokenizer/tokenizer.model", "info": "tokenizer/info.json"}


def tokenized_keys(shard: str) -> dict[str, str]:
    base = f"tokenized/{shard}"
    return {"tokens": f"{base}/tokens.bin", "index": f"{base}/index.parquet", "sidecar": f"{base}/tokens.json"}


PACKED_FOLDER = "packed"
PACKED_MANIFEST = f"{PACKED_FOLDER}/manifest.json"


def packed_key(name: str) -> str:
    return f"{PACKED_FOLDER}/{name}"


INSTRUCTIONS_FOLDER = "instructions"  # in the landing location: a team's instruction files (JSONL, Parquet)
INSTRUCTION_KEYS = {"examples": "instructions/examples.parquet", "dropped": "instructions/dropped.parquet"}
PREFERENCES_FOLDER = "preferences"  # in the landing location: preference pairs (JSONL, Parquet)
PREFERENCE_KEYS = {"pairs": "preferences/pairs.parquet", "dropped": "preferences/dropped.parquet",
                   "packed": "preferences/packed"}
SFT_KEYS = {"tokenizer": "sft/tokenizer.model", "chat_template": "sft/chat_template.jinja", "packed": "sft/packed"}
LABELS_FOLDER = "labels"
RATINGS_FOLDER = "ratings"  # rating sheets people filled in (`lm-assets rate`), read by human_ratings
QUALITY_LABELS_FOLDER = "quality/labels"
LABEL_KEYS = {t: f"{QUALITY_LABELS_FOLDER}/{t}.parquet" for t in ("examples", "unmatched", "rejected")} | {
    "summary": f"{QUALITY_LABELS_FOLDER}/summary.json"
}
CURRENT_CLASSIFIER = "quality/classifier/current.json"


def classifier_folder(model_hash: str) -> str:
    return f"quality/classifier/{model_hash}"


def classifier_keys(model_hash: str) -> dict[str, str]:
    folder = classifier_folder(model_hash)
    return {"model": f"{folder}/model.bin", "info": f"{folder}/info.json"}


def question_results_key(checkpoint: str, benchmark: str) -> str:
    """Per-question results of a benchmark on a checkpoint (its `checkpoints` partition key)."""
    return f"evaluation/{checkpoint}/{benchmark}_questions.parquet"


def safety_answers_key(checkpoint: str) -> str:
    """Every safety prompt a checkpoint answered, with the answer's verdict and the reason for it."""
    return f"evaluation/{checkpoint}/safety_answers.parquet"


def continuations_key(checkpoint: str) -> str:
    """Held-out documents' true and generated continuations, with their scores, for a checkpoint."""
    return f"evaluation/{checkpoint}/continuations.parquet"


def samples_key(checkpoint: str) -> str:
    """The prompts, greedy and sampled continuations a checkpoint (its `checkpoints` partition key) wrote."""
    return f"evaluation/{checkpoint}/samples.parquet"


CHECKPOINTS_FOLDER = "checkpoints"


def checkpoint_run_folder(run: str) -> str:
    """Where run `run` keeps its checkpoints, one folder per tag (`step_00000040`)."""
    return f"{CHECKPOINTS_FOLDER}/{run}"


def checkpoint_key(run: str, tag: str) -> str:
    """The `checkpoints` partition key of a run's checkpoint; `parse_checkpoint_key` reads it back."""
    return f"{run}-{tag}"


def parse_checkpoint_key(key: str) -> tuple[str, str]:
    """`<run>-<tag>` -> (run, tag), both checked (`corpus.keys.UnsafeKeyError` otherwise)."""
    return check_checkpoint_key(key)


def shard_account(store, shard: str, through: str) -> dict:
    """Whole-shard conservation as stored: the records read = the documents `through` keeps + those every
    stage up to `through` dropped + those quarantined."""
    stages = DOCUMENT_STAGES[: DOCUMENT_STAGES.index(through) + 1]
    raw = raw_keys(shard)
    records = json.loads(store.read_bytes(raw["summary"]))["records"]
    kept = store.row_count(stage_keys(through, shard)["documents"])
    dropped = sum(store.row_count(stage_keys(stage, shard)["dropped"]) for stage in stages)
    held = [quarantine_key(stage, shard) for stage in stages]
    return conservation(records, kept, dropped, sum(store.row_count(key) for key in held if store.exists(key)))
