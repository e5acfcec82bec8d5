"""decontaminated_shard: each shard's deduplicated documents minus those that share n-grams with the
evaluation sets (MMLU, and C-Eval when configured)."""

import functools
from pathlib import Path

import dagster as dg
from pydantic import Field, model_validator

from lm_assets.corpus.decontam.contamination import (
    DECONTAMINATED,
    ContaminationIndex,
    DecontamConfig,
    evaluation_texts,
    find_contamination,
    load_ceval,
    load_mmlu,
)
from lm_assets.defs.common.config import to_dataclass
from lm_assets.defs.common.environment import DEFAULT_MMLU_PATH, fill_from_environment
from lm_assets.defs.common.partitions import shard_asset
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.common.stages import CURATED_SCHEMA, DocumentStage, each_shard
from lm_assets.storage.layout import stage_keys

DECONTAM_DEFAULTS = DecontamConfig()
EVALUATION_SET_FIELDS = ("mmlu_path", "ceval_paths")  # the asset's own: what the index is built from


class DecontaminatedShardConfig(dg.Config):
    mmlu_path: str | None = Field(
        default=None, description="MMLU's zip; unset: $LM_ASSETS_MMLU_PATH, else data/eval/mmlu.zip; empty: no MMLU"
    )
    ceval_paths: list[str] = Field(
        default=[], description="C-Eval zips or folders whose questions are also indexed; empty: no C-Eval"
    )
    word_ngram: int = Field(
        default=DECONTAM_DEFAULTS.word_ngram, description="n-gram length in words, for benchmark texts mostly of words"
    )
    cjk_ngram: int = Field(
        default=DECONTAM_DEFAULTS.cjk_ngram,
        description="n-gram length in characters, for Chinese, Japanese and Korean benchmark texts",
    )
    min_matches: int = Field(
        default=DECONTAM_DEFAULTS.min_matches,
        description="distinct n-grams a document must share with a benchmark to be dropped",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_defaults(cls, data):
        return fill_from_environment(
            data, {"mmlu_path": ("LM_ASSETS_MMLU_PATH", DEFAULT_MMLU_PATH)}, paths=("mmlu_path", "ceval_paths")
        )


@functools.lru_cache(maxsize=4)
def contamination_index(mmlu_path: str | None, ceval_paths: tuple[str, ...], cfg: DecontamConfig):
    texts = {}
    if mmlu_path:
        texts["mmlu"] = evaluation_texts(load_mmlu(mmlu_path))
    if ceval_paths:
        texts["ceval"] = [t for path in ceval_paths for t in evaluation_texts(load_ceval(path))]
    return ContaminationIndex.build(texts, cfg)


DECONTAMINATED_STAGE = DocumentStage(DECONTAMINATED, CURATED_SCHEMA)


@shard_asset(
    group_name="decontam",
    kinds={"polars", "numpy"},
    deps=["deduplicated_shard"],
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=DECONTAMINATED_STAGE.check_specs(),
    description="Deduplicated documents minus those sharing 13-word (20-character for Chinese) n-grams with "
    "MMLU's questions or the configured C-Eval files.",
)
def decontaminated_shard(
    context: dg.AssetExecutionContext, config: DecontaminatedShardConfig, storage: StorageResource
):
    yield from each_shard(context, lambda shard: decontaminated_shard_of(shard, config, storage))


def decontaminated_shard_of(shard: str, config: DecontaminatedShardConfig, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.storage()
    docs = store.read_parquet(stage_keys("deduplicated", shard)["documents"])
    for path in [config.mmlu_path, *config.ceval_paths]:
        if path and not Path(path).exists():
            raise dg.Failure(f"evaluation set not found: {path} (set mmlu_path / ceval_paths in the config)")
    cfg = to_dataclass(DecontamConfig, config, exclude=EVALUATION_SET_FIELDS)
    index = contamination_index(config.mmlu_path, tuple(config.ceval_paths), cfg)
    result = find_contamination(docs, index, cfg)
    return DECONTAMINATED_STAGE.close(
        store, shard, docs.height, result,
        metadata={
            "dropped_per_benchmark": dg.MetadataValue.json(result.stats["dropped_per_benchmark"]),
            "ngrams_indexed": dg.MetadataValue.json(result.stats["ngrams_indexed"]),
        },
    )
