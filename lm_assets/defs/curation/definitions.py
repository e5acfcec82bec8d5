import dagster as dg

from lm_assets.corpus.curation import chinese_lexicon, extract, histograms, langid, main_content, pii, toxicity
from lm_assets.corpus.curation import pipeline as curation
from lm_assets.corpus.curation import policy as quality_policy
from lm_assets.corpus.curation import rules as quality
from lm_assets.corpus.quality import classifier
from lm_assets.corpus.quality import shipped as quality_model
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.curation.assets import (
    curated_shard,
    curated_with_current_classifier,
    curation_summary,
    extracted_shard,
)
from lm_assets.defs.curation.expectations import curated_expectations
from lm_assets.defs.curation.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [extracted_shard, curated_shard, curation_summary],
        CORPUS_TEAM,
        {
            "extracted_shard": source_version(extract, main_content),
            "curated_shard": source_version(
                curation, langid, quality, quality_policy, classifier, quality_model, toxicity, chinese_lexicon, pii,
                histograms,
            ),
            "curation_summary": source_version(histograms),
        },
    ),
    asset_checks=[curated_with_current_classifier, curated_expectations],
)
