"""Decontamination: the shard's documents that share no n-grams with the evaluation sets."""
