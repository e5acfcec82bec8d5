"""Deduplication: MinHash sketches, LSH edges, clusters, in memory and out of core."""
