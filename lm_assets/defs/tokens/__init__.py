"""Tokens: decontamination against the evaluation sets, the tokenizer, tokenized shards and the packed
training sequences."""
