"""to_dataclass: Dagster config to the corpus dataclasses, and the stage configs' defaults taken from them."""

from dataclasses import dataclass, field

import dagster as dg
import pytest

from lm_assets.corpus.curation.extract import ExtractConfig
from lm_assets.corpus.curation.langid import LangIdConfig
from lm_assets.corpus.curation.pipeline import CurationConfig
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.decontam.contamination import DecontamConfig
from lm_assets.corpus.dedup.config import DedupConfig
from lm_assets.corpus.ingest.readers import ReaderConfig
from lm_assets.corpus.quality.classifier import ClassifierConfig
from lm_assets.corpus.tokens.packing import PackingConfig
from lm_assets.corpus.tokens.tokenizer import TokenizerConfig
from lm_assets.defs.common.config import to_dataclass

from lm_assets.defs.common.toxicity import ToxicityResource

@dataclass(frozen=True)
class Inner:
    size: int = 3
    names: tuple[str, ...] = ("a",)

@dataclass(frozen=True)
class Outer:
    rate: float = 0.5
    inner: Inner = field(default_factory=Inner)
    maybe: Inner | None = None

class InnerConfig(dg.Config):
    size: int = 3
    names: list[str] = ["a"]

class OuterConfig(dg.Config):
    rate: float = 0.5
    inner: InnerConfig = InnerConfig()
    asset_only: str = "x"

def test_defaults_and_given_fields():
    assert to_dataclass(Outer, {}) == Outer()
    assert to_dataclass(Outer, {"rate": 0.25}) == Outer(rate=0.25)

def test_nested_dataclasses_from_mappings_and_configs():
    built = to_dataclass(Outer, {"inner": {"size": 7, "names": ["b", "c"]}, "maybe": {"size": 1}})
    assert built == Outer(inner=Inner(size=7, names=("b", "c")), maybe=Inner(size=1))
    assert isinstance(built.inner.names, tuple)
    assert to_dataclass(Outer, OuterConfig(inner=InnerConfig(size=9)), exclude=["asset_only"]).inner == Inner(size=9)

def test_unknown_fields_are_refused_with_the_valid_ones():
    with pytest.raises(dg.Failure, match=r"Outer: unknown config field\(s\) \['asset_only'\]; valid fields: \['inner', 'maybe', 'rate'\]"):
        to_dataclass(Outer, OuterConfig())
    with pytest.raises(dg.Failure, match=r"Outer.inner: unknown config field\(s\) \['colour'\]"):
        to_dataclass(Outer, {"inner": {"colour": "red"}})

def test_dataclass_values_pass_through():
    inner = Inner(size=2)
    assert to_dataclass(Outer, {"inner": inner}).inner is inner

def test_stage_configs_default_to_the_corpus_defaults(monkeypatch):
    for variable in ("LM_ASSETS_SEQ_LEN", "LM_ASSETS_VOCAB_SIZE", "LM_ASSETS_TOXICITY_BACKEND",
                     "LM_ASSETS_DETOXIFY_CHECKPOINT", "LM_ASSETS_DETOXIFY_HF_CONFIG", "LM_ASSETS_LAUNCHPAD_DEFAULTS"):
        monkeypatch.delenv(variable, raising=False)
    from lm_assets.defs.curation.assets import CuratedShardConfig, ExtractedShardConfig, LanguageIdConfig, ToxicityRulesConfig
    from lm_assets.defs.decontam.assets import DecontaminatedShardConfig
    from lm_assets.defs.dedup.assets import DedupSettings
    from lm_assets.defs.ingest.assets import RawShardConfig
    from lm_assets.defs.quality.assets import QualityClassifierConfig
    from lm_assets.defs.tokens.assets import PackedDatasetConfig, TokenizerTrainingConfig

    assert to_dataclass(ReaderConfig, RawShardConfig()) == ReaderConfig()
    assert to_dataclass(ExtractConfig, ExtractedShardConfig()) == ExtractConfig()
    assert to_dataclass(ClassifierConfig, QualityClassifierConfig(), exclude=["min_balanced_accuracy"]) == ClassifierConfig()
    assert ToxicityResource().scorer_config(ToxicityRulesConfig()) == ToxicityConfig()
    assert to_dataclass(LangIdConfig, LanguageIdConfig()) == LangIdConfig()
    assert to_dataclass(TokenizerConfig, TokenizerTrainingConfig(), exclude=["adopt_from", "extra_pieces"]) == TokenizerConfig()
    assert to_dataclass(PackingConfig, PackedDatasetConfig(), exclude=["curriculum_reference"]) == PackingConfig()
    assert to_dataclass(DecontamConfig, DecontaminatedShardConfig(), exclude=["mmlu_path", "ceval_paths"]) == DecontamConfig()
    assert DedupSettings().dedup_config() == DedupConfig()
    curation = CuratedShardConfig(quality_policy="rules").curation_config(ToxicityResource())
    assert (curation.order, curation.langid) == (CurationConfig().order, CurationConfig().langid)

def test_one_default_per_setting():
    # Rows of seq_len tokens give seq_len - 1 positions: 2049 fills the presets' 2048-token context.
    assert PackingConfig().seq_len == 2049
    from lm_assets.defs.tokens.assets import TokenizerTrainingConfig

    assert TokenizerTrainingConfig().num_threads == TokenizerConfig().num_threads

def test_training_and_evaluation_configs_default_to_the_program_defaults(monkeypatch):
    monkeypatch.delenv("LM_ASSETS_QUALITY_POLICY", raising=False)
    from lm_assets.defs.curation.assets import CuratedShardConfig
    from lm_assets.defs.evaluation.assets import CevalScoreConfig, CheckpointSamplesConfig, MmluScoreConfig
    from lm_assets.defs.evaluation.common import EvaluationDeviceConfig
    from lm_assets.defs.training.assets import TrainingRunConfig
    from lm_assets.evaluation.prompts import DEFAULT_FEWSHOT
    from lm_assets.evaluation.samples import SampleSettings
    from lm_assets.training.config import TrainConfig, config_from_dict

    assert CuratedShardConfig().curation_config(ToxicityResource()).policy == CurationConfig().policy == "classifier"
    built = config_from_dict(TrainingRunConfig().train_config("packed", "ckpt", "tok.model", seq_len=2049))
    defaults = TrainConfig()
    # What the launcher decides: the paths, the context from the packed sequences, and dp, since the
    # launcher starts pp × tp × dp processes (the program infers dp from the world size when it is 0).
    assert (built.parallel.pp, built.parallel.tp, built.parallel.dp, defaults.parallel.dp) == (1, 1, 1, 0)
    for name in ("model", "precision", "zero_stage", "micro_batch_size", "grad_accum", "optim", "seed", "steps",
                 "compile", "document_mask", "peak_flops", "kernels", "spike", "log_every"):
        assert getattr(built, name) == getattr(defaults, name), name
    assert built.checkpoint.save_every == defaults.checkpoint.save_every
    excluded = ("prompts", *EvaluationDeviceConfig.model_fields)
    assert to_dataclass(SampleSettings, CheckpointSamplesConfig(), exclude=excluded) == SampleSettings()
    assert MmluScoreConfig().num_fewshot == CevalScoreConfig().num_fewshot == DEFAULT_FEWSHOT
