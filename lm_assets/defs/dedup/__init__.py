"""Dedup: MinHash sketches per shard, duplicate clusters across shards, and each shard's survivors."""
