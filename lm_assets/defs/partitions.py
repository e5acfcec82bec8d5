from collections.abc import Callable

import dagster as dg

from lm_assets.corpus.keys import UnsafeKeyError, check_name

shard_partitions = dg.DynamicPartitionsDefinition(name="shards")


def shards_with(instance: dg.DagsterInstance, store, key_of: Callable[[str], str]) -> list[str]:
    """The known shards, in partition order, whose file `key_of(shard)` is in `store`."""
    return [shard for shard in instance.get_dynamic_partitions(shard_partitions.name) if store.exists(key_of(shard))]


def shard_key(context) -> str:
    """The run's shard key, refused before anything is read or written when it is not one safe file name."""
    try:
        return check_name(context.partition_key)
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
