"""The toxicity model: which scorer curation and the safety evaluations run, and where, as one resource.

The thresholds that decide what is toxic stay in each asset's config (`ToxicityRulesConfig`); the model that
scores is set here once. A field left unset is read when a run starts, never at import: the backend from
$LM_ASSETS_TOXICITY_BACKEND, else the selected profile's (`make demo` and `make ui`: the offline one), else auto.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from lm_assets.corpus.curation.toxicity import BACKENDS, DETOXIFY_MODELS, ToxicityConfig
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, Device, choices
from lm_assets.defs.common.environment import from_environment, unset_means
from lm_assets.defs.common.sample_defaults import launchpad_default

TOXICITY_DEFAULTS = ToxicityConfig()
ToxicityBackend = choices("ToxicityBackend", BACKENDS)
DetoxifyModel = choices("DetoxifyModel", DETOXIFY_MODELS)
BACKEND_VARIABLE = "LM_ASSETS_TOXICITY_BACKEND"


class ToxicityResource(dg.ConfigurableResource):
    """The toxicity scorer: Detoxify or alt-profanity-check, the model file, the device. The metadata's
    toxicity_backend and toxicity_model say which ran and why."""

    model_config = ENUM_FIELDS_AS_VALUES

    backend: ToxicityBackend | None = Field(
        default=None,
        description="auto (detoxify where torch sees a CUDA device, profanity_check on a CPU, where Detoxify would "
        "take nearly all of curation's time), detoxify or profanity_check; "
        + unset_means(BACKEND_VARIABLE, launchpad_default("toxicity", "backend", TOXICITY_DEFAULTS.backend)),
    )
    detoxify_model_type: DetoxifyModel = Field(
        default=TOXICITY_DEFAULTS.detoxify_model_type,
        description="Detoxify's release model (original, unbiased, multilingual), downloaded unless "
        "detoxify_checkpoint is set",
    )
    detoxify_checkpoint: str | None = Field(
        default=None,
        description="a local Detoxify .ckpt file, for offline use; "
        + unset_means("LM_ASSETS_DETOXIFY_CHECKPOINT", "the release model's download"),
    )
    detoxify_hf_config_path: str | None = Field(
        default=None,
        description="a folder with the model's config.json and tokenizer files, for offline use; "
        + unset_means("LM_ASSETS_DETOXIFY_HF_CONFIG", "from the Hugging Face Hub"),
    )
    device: Device = Field(
        default=TOXICITY_DEFAULTS.device,
        description="torch device Detoxify runs on: auto (cuda when torch sees a GPU, else cpu), cpu or cuda (the "
        "first GPU CUDA_VISIBLE_DEVICES leaves)",
    )
    prescreen_threshold: float | None = Field(
        default=TOXICITY_DEFAULTS.prescreen_threshold,
        description="detoxify only: lines alt-profanity-check scores below this count as clean without the BERT "
        "model; unset: the model reads every line",
    )

    def settings(self) -> dict[str, Any]:
        """The scorer's settings as a run started now uses them, the environment read now."""
        # Unset: the variable, else the backend of the profile $LM_ASSETS_LAUNCHPAD_DEFAULTS selects, else auto.
        backend = str(from_environment(self.backend, BACKEND_VARIABLE,
                                       launchpad_default("toxicity", "backend", TOXICITY_DEFAULTS.backend)))
        if backend not in BACKENDS:
            raise ValueError(f"${BACKEND_VARIABLE}={backend!r}: use one of {', '.join(BACKENDS)}")
        return {
            "backend": backend,
            "detoxify_model_type": str(self.detoxify_model_type),
            "detoxify_checkpoint": from_environment(self.detoxify_checkpoint, "LM_ASSETS_DETOXIFY_CHECKPOINT",
                                                    TOXICITY_DEFAULTS.detoxify_checkpoint),
            "detoxify_hf_config_path": from_environment(self.detoxify_hf_config_path, "LM_ASSETS_DETOXIFY_HF_CONFIG",
                                                        TOXICITY_DEFAULTS.detoxify_hf_config_path),
            "device": str(self.device),
            "prescreen_threshold": self.prescreen_threshold,
        }

    def scorer_config(self, rules: dg.Config) -> ToxicityConfig:
        """The library's config: this scorer with an asset's thresholds (`ToxicityRulesConfig`)."""
        return ToxicityConfig(**self.settings(), **rules.model_dump())
