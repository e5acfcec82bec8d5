import dagster as dg

from lm_assets.defs.curation.assets import curated_shard, curated_with_current_classifier, extracted_shard
from lm_assets.defs.curation.expectations import curated_expectations
from lm_assets.defs.curation.quality import quality_classifier, quality_labels

defs = dg.Definitions(
    assets=[extracted_shard, quality_labels, quality_classifier, curated_shard],
    asset_checks=[curated_with_current_classifier, curated_expectations],
)
