"""A Great Expectations suite over curated_shard, run inside a Dagster asset check.

GX 1.x cannot read polars frames, so a sample goes through pandas. GX is imported lazily:
its import alone costs seconds.
"""


import dagster as dg

from lm_assets.defs.common.partitions import shard_keys, shard_partitions
from lm_assets.defs.common.reporting import latest_metadata, partitioned_checks_allowed
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.curation.assets import curated_shard
from lm_assets.storage.layout import stage_keys

SAMPLE_ROWS = 2_000


def partitioned_asset_check(**kwargs):
    """`dg.asset_check(**kwargs)` with a `partitions_def` (see `partitioned_check_spec`)."""

    def decorate(fn):
        with partitioned_checks_allowed():
            return dg.asset_check(**kwargs)(fn)

    return decorate


def curated_suite(allowed_languages: list[str]):
    import great_expectations as gx

    suite = gx.ExpectationSuite(name="curated_shard")
    for expectation in (
        gx.expectations.ExpectColumnValuesToNotBeNull(column="doc_id"),
        gx.expectations.ExpectColumnValuesToBeUnique(column="doc_id"),
        gx.expectations.ExpectColumnValuesToNotBeNull(column="text"),
        gx.expectations.ExpectColumnValueLengthsToBeBetween(column="text", min_value=1),
        gx.expectations.ExpectColumnValuesToBeInSet(column="lang", value_set=allowed_languages),
        gx.expectations.ExpectColumnValuesToBeBetween(column="lang_score", min_value=0.0, max_value=1.0),
        gx.expectations.ExpectColumnValuesToBeBetween(column="tox_frac", min_value=0.0, max_value=1.0),
    ):
        suite.add_expectation(expectation)
    return suite


def validate_frame(frame, allowed_languages: list[str]) -> dict:
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = gx.data_context.types.base.ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("lm_assets")
    batch_definition = source.add_dataframe_asset("curated_shard").add_batch_definition_whole_dataframe("sample")
    batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(curated_suite(allowed_languages))
    failed = [
        r.expectation_config.type + ":" + str(r.expectation_config.kwargs.get("column"))
        for r in result.results
        if not r.success
    ]
    return {"success": bool(result.success), "evaluated": len(result.results), "failed": failed}


def allowed_languages(instance: dg.DagsterInstance, shard: str) -> list[str] | None:
    """The languages the shard's latest curated_shard materialization kept: its run's config, as it recorded it."""
    effective = (latest_metadata(instance, curated_shard.key, shard) or {}).get("effective_config")
    return effective.value["langid"]["allowed"] if effective else None


@partitioned_asset_check(
    asset=curated_shard,
    partitions_def=shard_partitions,
    description="Great Expectations suite on a sample of the curated shard: ids, text, language and score ranges.",
)
def curated_expectations(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    """One result for the run's shards (several in a backfill run): it passes when every shard's sample does."""
    outcomes = {shard: shard_expectations(context.instance, storage, shard) for shard in shard_keys(context)}
    if len(outcomes) == 1:
        return next(iter(outcomes.values()))
    failed = [shard for shard, outcome in outcomes.items() if not outcome.passed]
    return dg.AssetCheckResult(
        passed=not failed,
        metadata={"shards": len(outcomes), "failed_shards": ", ".join(failed) or "none",
                  "by_shard": dg.MetadataValue.json({shard: {k: v.value for k, v in o.metadata.items()}
                                                     for shard, o in outcomes.items()})},
    )


def shard_expectations(instance: dg.DagsterInstance, storage: StorageResource, shard: str) -> dg.AssetCheckResult:
    allowed = allowed_languages(instance, shard)
    if allowed is None:
        return dg.AssetCheckResult(passed=False, metadata={"reason": "no curated_shard materialization of this shard recorded"})
    docs = storage.storage().read_parquet(stage_keys("curated", shard)["documents"])
    sample = docs.head(SAMPLE_ROWS).select("doc_id", "text", "lang", "lang_score", "tox_frac").to_pandas()
    outcome = validate_frame(sample, allowed)
    return dg.AssetCheckResult(
        passed=outcome["success"],
        metadata={"rows_validated": len(sample), "expectations": outcome["evaluated"], "failed": dg.MetadataValue.json(outcome["failed"])},
    )
