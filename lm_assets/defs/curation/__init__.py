"""Curation: extracted_shard and curated_shard, the quality labels and classifier they learn from, and
the Great Expectations suite on curated documents."""
