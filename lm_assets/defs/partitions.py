import dagster as dg

from lm_assets.corpus.keys import UnsafeKeyError, check_name

shard_partitions = dg.DynamicPartitionsDefinition(name="shards")


def shard_key(context) -> str:
    """The run's shard key, refused before anything is read or written when it is not one safe file name."""
    try:
        return check_name(context.partition_key)
    except UnsafeKeyError as exc:
        raise dg.Failure(description=str(exc)) from exc
