"""Curation: extracted_shard and curated_shard, the quality rules' typed config, and the Great
Expectations suite on curated documents."""
