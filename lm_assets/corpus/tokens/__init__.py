"""Tokens: the tokenizer, tokenized shards and packed sequences."""
