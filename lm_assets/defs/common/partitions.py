from collections.abc import Callable

import dagster as dg

from lm_assets.storage.keys import UnsafeKeyError, check_name

shard_partitions = dg.DynamicPartitionsDefinition(name="shards")
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


def shard_key(context) -> str:
    """The run's shard key, refused before anything is read or written when it is not one safe file name."""
    try:
        return check_name(context.partition_key)
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
