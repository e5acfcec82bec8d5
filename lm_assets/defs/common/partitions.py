import warnings
from collections.abc import Callable

import dagster as dg

from lm_assets.defs.common.environment import from_environment
from lm_assets.storage.keys import UnsafeKeyError, check_name

shard_partitions = dg.DynamicPartitionsDefinition(name="shards")
# A backfill of the per-shard stages runs this many shards a run (90,000 WARC files: 1,800 runs), each
# shard still its own materialization with its own checks (`stages.each_shard`).
SHARDS_PER_RUN = int(from_environment(None, "LM_ASSETS_SHARDS_PER_RUN"))


def shard_asset(**kwargs):
    """`dg.asset` for a per-shard stage: shard partitions and the backfill policy of `SHARDS_PER_RUN`
    shards a run (a beta parameter of Dagster 1.x, whose BetaWarning at every load is silenced here)."""

    def decorate(fn):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*backfill_policy", category=dg.BetaWarning)
            policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN)
            return dg.asset(partitions_def=shard_partitions, backfill_policy=policy, **kwargs)(fn)

    return decorate


def partition_range_tags(first: str, last: str) -> dict[str, str]:
    """The tags that make a run materialize the partitions from `first` to `last`, as a backfill run does."""
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


BAND_KEY_PREFIX = "bands-"


def band_partition_key(band_range: tuple[int, int]) -> str:
    """`bands-000-006`: LSH bands 0 <= band < 6."""
    lo, hi = band_range
    return f"{BAND_KEY_PREFIX}{lo:03d}-{hi:03d}"


def parse_band_partition_key(key: str) -> tuple[int, int]:
    lo, hi = key.removeprefix(BAND_KEY_PREFIX).split("-")
    return int(lo), int(hi)


# One per LSH band range of the dedup resource's settings (`bands-000-006`, ...): minhash_signatures
# registers them when it runs, so they follow the settings a deployment gives the resource.
band_partitions = dg.DynamicPartitionsDefinition(name="dedup_bands")


# One per saved checkpoint: `<run>-<tag>` (lm_assets/storage/layout.py builds and parses it).
checkpoint_partitions = dg.DynamicPartitionsDefinition(name="checkpoints")


def add_new_partitions(
    instance: dg.DagsterInstance, partitions_def: dg.DynamicPartitionsDefinition, keys: list[str]
) -> list[str]:
    """Adds the keys the instance does not know yet as partitions, in order; returns them."""
    known = set(instance.get_dynamic_partitions(partitions_def.name))
    new = [key for key in keys if key not in known]
    if new:
        instance.add_dynamic_partitions(partitions_def.name, new)
    return new


def shards_with(instance: dg.DagsterInstance, store, key_of: Callable[[str], str]) -> list[str]:
    """The known shards, in partition order, whose file `key_of(shard)` is in `store`."""
    return [shard for shard in instance.get_dynamic_partitions(shard_partitions.name) if store.exists(key_of(shard))]


def shard_keys(context) -> list[str]:
    """The run's shard keys (several in a backfill run), each refused before anything is read or written
    when it is not one safe file name."""
    return [safe_shard(key) for key in context.partition_keys]


def safe_shard(key: str) -> str:
    try:
        return check_name(key)
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
