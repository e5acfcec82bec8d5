import dagster as dg

from lm_assets.corpus.curation import rules as quality
from lm_assets.corpus.quality import classifier, labels
from lm_assets.corpus.quality import shipped as quality_model
from lm_assets.defs.common.catalog import CORPUS_TEAM, catalogued, source_version
from lm_assets.defs.quality.assets import quality_classifier, quality_labels
from lm_assets.defs.quality.jobs import JOBS

defs = dg.Definitions(
    jobs=JOBS,
    assets=catalogued(
        [quality_labels, quality_classifier],
        CORPUS_TEAM,
        {
            "quality_labels": source_version(labels),
            "quality_classifier": source_version(classifier, quality, quality_model),
        },
    ),
)
