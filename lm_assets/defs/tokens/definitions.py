import dagster as dg

from lm_assets.defs.tokens.assets import (
    decontaminated_shard,
    packed_dataset,
    tokenized_shard,
    tokenized_with_current_tokenizer,
    tokenizer,
)

defs = dg.Definitions(
    assets=[decontaminated_shard, tokenizer, tokenized_shard, packed_dataset],
    asset_checks=[tokenized_with_current_tokenizer],
)
