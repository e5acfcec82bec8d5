"""The jobs that train the tokenizer, tokenize each shard and pack the training sequences."""

from lm_assets.defs.common.jobs import workload_job

tokenizer_job = workload_job("tokenizer_job", "tokens", ("tokenizer",), "Train the tokenizer.")
tokenized_shard_job = workload_job(
    "tokenized_shard_job", "tokens", ("tokenized_shard",), "Tokenize one shard with the current tokenizer."
)
packing_job = workload_job("packing_job", "tokens", ("packed_dataset",), "Pack training sequences.")

JOBS = [tokenizer_job, tokenized_shard_job, packing_job]
