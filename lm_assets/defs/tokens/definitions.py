import dagster as dg

from lm_assets.corpus import decontam, packing, tokenizer as tokenizer_training, tokens
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.tokens.assets import (
    decontaminated_shard,
    packed_dataset,
    tokenized_shard,
    tokenized_with_current_tokenizer,
    tokenizer,
)
from lm_assets.defs.tokens.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [decontaminated_shard, tokenizer, tokenized_shard, packed_dataset],
        CORPUS_TEAM,
        {
            "decontaminated_shard": source_version(decontam),
            "tokenizer": source_version(tokenizer_training),
            "tokenized_shard": source_version(tokens),
            "packed_dataset": source_version(packing),
        },
    ),
    asset_checks=[tokenized_with_current_tokenizer],
)
