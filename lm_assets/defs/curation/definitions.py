import dagster as dg

from lm_assets.corpus import curation, extract, langid, main_content, pii, quality, quality_classifier as classifier
from lm_assets.corpus import chinese_lexicon, quality_model, quality_policy, toxicity
from lm_assets.corpus import quality_labels as labels
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.curation.assets import curated_shard, curated_with_current_classifier, extracted_shard
from lm_assets.defs.curation.expectations import curated_expectations
from lm_assets.defs.curation.quality import quality_classifier, quality_labels
from lm_assets.defs.curation.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [extracted_shard, quality_labels, quality_classifier, curated_shard],
        CORPUS_TEAM,
        {
            "extracted_shard": source_version(extract, main_content),
            "quality_labels": source_version(labels),
            "quality_classifier": source_version(classifier, quality, quality_model),
            "curated_shard": source_version(
                curation, langid, quality, quality_policy, classifier, quality_model, toxicity, chinese_lexicon, pii
            ),
        },
    ),
    asset_checks=[curated_with_current_classifier, curated_expectations],
)
