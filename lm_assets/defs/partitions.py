import dagster as dg

shard_partitions = dg.DynamicPartitionsDefinition(name="shards")
