import dagster as dg

from lm_assets.corpus.tokens import packing
from lm_assets.corpus.tokens import tokenize as tokens
from lm_assets.corpus.tokens import tokenizer as tokenizer_training
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.tokens.assets import (
    packed_dataset,
    tokenized_shard,
    tokenized_with_current_tokenizer,
    tokenizer,
)
from lm_assets.defs.tokens.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [tokenizer, tokenized_shard, packed_dataset],
        CORPUS_TEAM,
        {
            "tokenizer": source_version(tokenizer_training),
            "tokenized_shard": source_version(tokens),
            "packed_dataset": source_version(packing),
        },
    ),
    asset_checks=[tokenized_with_current_tokenizer],
)
