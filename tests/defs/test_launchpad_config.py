"""What the Launchpad shows: every config field says what it does, a closed choice is a dropdown whose
value reaches the corpus library as its plain string, and the quality thresholds are typed fields by
rule family on top of the preset."""

import dataclasses
import enum
import importlib
import json
import types
import typing

import dagster as dg
import pydantic
import pytest
from dagster._config import ConfigTypeKind

from lm_assets.defs.common.toxicity import ToxicityResource


def subclasses(cls: type):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def location_config_classes() -> list[type]:
    """The Config and ConfigurableResource classes of lm_assets, once the code location has defined them all."""
    importlib.import_module("lm_assets.definitions")
    found = {cls for cls in subclasses(dg.Config) if cls.__module__.startswith("lm_assets.")}
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__name__}")


def test_the_config_classes_are_found():
    names = {cls.__name__ for cls in location_config_classes()}
    assert {"CuratedShardConfig", "PackedDatasetConfig", "TrainingLauncher", "StorageResource", "ClusterSpec"} <= names


def test_every_config_field_has_a_description():
    undescribed = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls in location_config_classes()
        for name, field in cls.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert undescribed == []


def enum_values(config_type) -> list[str] | None:
    """The choices of a Dagster config type that is an enum (or a list of one, or either left unset)."""
    while config_type.kind in (ConfigTypeKind.NONEABLE, ConfigTypeKind.ARRAY):
        config_type = config_type.inner_type
    if config_type.kind != ConfigTypeKind.ENUM:
        return None
    return [value.config_value for value in config_type.enum_values]


def field_choices(asset, *path: str) -> list[str] | None:
    config_type = asset.op.config_schema.config_type
    for name in path[:-1]:
        config_type = config_type.fields[name].config_type
    return enum_values(config_type.fields[path[-1]].config_type)


def test_choices_are_dropdowns_of_the_corpus_values():
    from lm_assets.corpus.curation.extract import EXTRACTORS
    from lm_assets.corpus.curation.pipeline import STEPS
    from lm_assets.corpus.curation.policy import POLICIES
    from lm_assets.corpus.curation.rules import PRESETS
    from lm_assets.corpus.curation.toxicity import BACKENDS
    from lm_assets.corpus.decontam.contamination import BENCHMARK_SPLITS
    from lm_assets.corpus.quality.classifier import FEATURES
    from lm_assets.corpus.tokens.packing import PACKED_SPLITS
    from lm_assets.corpus.tokens.packing import STRATEGIES
    from lm_assets.defs.curation.assets import curated_shard, extracted_shard
    from lm_assets.defs.evaluation.assets import ceval_score, mmlu_score, perplexity
    from lm_assets.defs.quality.assets import quality_classifier
    from lm_assets.defs.tokens.assets import packed_dataset
    from lm_assets.defs.training.assets import training_run_and_checkpoint
    from lm_assets.training.config import PRECISIONS
    from lm_assets.training.config import PRESETS as MODEL_PRESETS

    assert field_choices(curated_shard, "quality_policy") == list(POLICIES)
    assert field_choices(curated_shard, "quality_preset") == list(PRESETS)
    assert field_choices(curated_shard, "order") == list(STEPS)
    assert enum_values(ToxicityResource.to_config_schema().config_type.fields["backend"].config_type) == list(BACKENDS)
    assert field_choices(extracted_shard, "extractor") == list(EXTRACTORS)
    assert field_choices(quality_classifier, "features") == list(FEATURES)
    assert field_choices(packed_dataset, "strategy") == list(STRATEGIES)
    assert field_choices(mmlu_score, "split") == field_choices(ceval_score, "split") == list(BENCHMARK_SPLITS)
    assert field_choices(perplexity, "split") == list(PACKED_SPLITS)
    assert field_choices(training_run_and_checkpoint, "precision") == list(PRECISIONS)
    assert field_choices(training_run_and_checkpoint, "model") == list(MODEL_PRESETS)
    assert field_choices(curated_shard, "langid", "allowed") is None  # an open list stays strings


def test_the_training_launcher_choices_are_enums():
    from lm_assets.defs.training.assets import TrainingLauncher

    for name in ("backend", "local_launcher"):
        annotation = TrainingLauncher.model_fields[name].annotation
        assert any(isinstance(t, type) and issubclass(t, enum.Enum) for t in (annotation, *typing.get_args(annotation)))


def test_an_enum_field_holds_the_plain_string(monkeypatch):
    monkeypatch.delenv("LM_ASSETS_TOXICITY_BACKEND", raising=False)
    monkeypatch.delenv("LM_ASSETS_QUALITY_POLICY", raising=False)
    from lm_assets.defs.common.reporting import config_hash
    from lm_assets.defs.curation.assets import CuratedShardConfig, QualityPolicy

    config = CuratedShardConfig(quality_policy=QualityPolicy.both)
    assert type(config.quality_policy) is str and config.quality_policy == "both"
    assert type(config.quality_preset) is str and config.order == ["langid", "quality", "toxicity", "pii"]
    dumped = json.dumps(config.model_dump())  # no enum member left for json to trip over
    assert '"quality_policy": "both"' in dumped and "QualityPolicy" not in dumped
    assert config_hash(config) == config_hash(CuratedShardConfig(quality_policy="both"))


def test_environment_choices_become_plain_strings_in_the_dataclasses(monkeypatch):
    monkeypatch.setenv("LM_ASSETS_TOXICITY_BACKEND", "profanity_check")
    monkeypatch.setenv("LM_ASSETS_QUALITY_POLICY", "both")
    from lm_assets.defs.curation.assets import CuratedShardConfig

    curation = CuratedShardConfig().curation_config(ToxicityResource())
    assert (curation.policy, curation.toxicity.backend) == ("both", "profanity_check")
    assert type(curation.policy) is str and type(curation.toxicity.backend) is str
    assert all(type(step) is str for step in curation.order) and isinstance(curation.order, tuple)
    # A value set in the config wins over the environment.
    assert CuratedShardConfig(quality_policy="rules").curation_config(ToxicityResource()).policy == "rules"
    assert ToxicityResource(backend="detoxify").scorer_config(CuratedShardConfig().toxicity).backend == "detoxify"


def test_an_unknown_choice_is_refused_naming_the_valid_ones(monkeypatch):
    from lm_assets.defs.curation.assets import CuratedShardConfig

    with pytest.raises(pydantic.ValidationError, match="'rules', 'classifier' or 'both'"):
        CuratedShardConfig(quality_policy="vibes")
    with pytest.raises(pydantic.ValidationError, match="'detoxify' or 'profanity_check'"):
        ToxicityResource(backend="perspective")
    monkeypatch.setenv("LM_ASSETS_TOXICITY_BACKEND", "perspective")
    with pytest.raises(ValueError, match=r"\$LM_ASSETS_TOXICITY_BACKEND='perspective': use one of auto, detoxify, profanity_check"):
        ToxicityResource().settings()


def test_to_dataclass_takes_enum_members_as_their_values():
    from lm_assets.corpus.tokens.packing import PackingConfig
    from lm_assets.defs.common.config import to_dataclass
    from lm_assets.defs.tokens.assets import PackingStrategy

    packing = to_dataclass(PackingConfig, {"strategy": PackingStrategy.bfd})
    assert packing.strategy == "bfd" and type(packing.strategy) is str


def test_a_run_config_choice_reaches_the_asset_as_a_string():
    from lm_assets.defs.curation.assets import CuratedShardConfig


    seen = {}

    @dg.asset
    def probe(config: CuratedShardConfig, toxicity: ToxicityResource) -> None:
        seen.update(policy=config.quality_policy, backend=toxicity.settings()["backend"], preset=config.quality_preset)

    run_config = {"ops": {"probe": {"config": {"quality_policy": "rules", "quality_preset": "fineweb"}}},
                  "resources": {"toxicity": {"config": {"backend": "profanity_check"}}}}
    assert dg.materialize([probe], resources={"toxicity": ToxicityResource()}, run_config=run_config).success
    assert seen == {"policy": "rules", "backend": "profanity_check", "preset": "fineweb"}
    assert all(type(value) is str for value in seen.values())


def curated_quality(monkeypatch, **config):
    monkeypatch.delenv("LM_ASSETS_QUALITY_POLICY", raising=False)
    from lm_assets.defs.curation.assets import CuratedShardConfig

    return CuratedShardConfig(**config).curation_config(ToxicityResource()).quality


def test_unset_quality_rules_are_the_preset_exactly(monkeypatch):
    from lm_assets.corpus.curation.rules import RulesConfig, preset

    assert curated_quality(monkeypatch) == preset("lm_assets") == RulesConfig()
    assert curated_quality(monkeypatch, quality_preset="fineweb") == preset("fineweb")
    assert curated_quality(monkeypatch, quality_preset="published") == preset("published") != RulesConfig()


def test_a_typed_threshold_reaches_the_quality_config(monkeypatch):
    from lm_assets.corpus.curation.rules import preset

    rules = {
        "families": ["gopher_quality", "c4"],
        "gopher_quality": {"min_doc_words": 10},
        "gopher_repetition": {"dup_n_grams": [{"n": 5, "fraction": 0.5}], "top_n_grams": []},
        "c4": {"c4_filter_curly_bracket": True},
    }
    quality = curated_quality(monkeypatch, quality_rules=rules)
    expected = preset(
        "lm_assets", families=("gopher_quality", "c4"), min_doc_words=10, dup_n_grams=((5, 0.5),), top_n_grams=(),
        c4_filter_curly_bracket=True,
    )
    assert quality == expected and quality.min_doc_words == 10
    assert type(quality.dup_n_grams[0][0]) is int  # n stays a whole number: it names the q_dup_5gram_frac signal


def test_switching_a_threshold_off(monkeypatch):
    from lm_assets.corpus.curation.rules import preset, rule_reasons

    quality = curated_quality(monkeypatch, quality_rules={"disabled": ["min_stop_words", "max_licence_share"]})
    assert quality == preset("lm_assets", min_stop_words=None, max_licence_share=None)
    assert quality.min_stop_words is None and "gopher_quality:min_stop_words" not in rule_reasons(quality)
    assert "gopher_quality:min_stop_words" in rule_reasons(preset("lm_assets"))


def test_a_threshold_both_set_and_off_is_refused():
    from lm_assets.defs.curation.assets import CuratedShardConfig

    with pytest.raises(pydantic.ValidationError, match=r"both set and switched off: \['min_doc_words'\]"):
        CuratedShardConfig(quality_rules={"gopher_quality": {"min_doc_words": 10}, "disabled": ["min_doc_words"]})


def test_the_rule_families_cover_quality_config():
    from lm_assets.corpus.curation.rules import FAMILIES, RulesConfig
    from lm_assets.defs.curation.quality_rules import PRESET_DEFAULTS, RuleOverrides, RuleThreshold, shown

    family_classes = [RuleOverrides.model_fields[name].annotation for name in FAMILIES]
    typed = [name for cls in family_classes for name in cls.model_fields]
    assert len(typed) == len(set(typed))
    # stop_words, a long list per language, is left to the preset.
    assert set(typed) | {"families", "stop_words"} == {f.name for f in dataclasses.fields(RulesConfig)}
    assert {t.value for t in RuleThreshold} <= set(typed)
    hints = typing.get_type_hints(RulesConfig)
    for cls in family_classes:
        for name, field in cls.model_fields.items():
            assert field.default is None
            preset_value = shown(getattr(PRESET_DEFAULTS, name))
            assert field.description.endswith(f"unset: the preset's ({preset_value} in lm_assets)")
            assert value_type(field.annotation) == value_type(hints[name]), (cls.__name__, name)


def value_type(hint):
    """A field's type as its values are shaped, whatever spells it: None dropped, lists and variable tuples as
    sequences, Config classes and fixed tuples as records of their fields."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return value_type(args[0]) if len(args) == 1 else tuple(value_type(arg) for arg in args)
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return ("sequence", value_type(args[0]))
    if origin is tuple:
        return ("record", *(value_type(arg) for arg in args))
    if isinstance(hint, type) and issubclass(hint, dg.Config):
        return ("record", *(value_type(field.annotation) for field in hint.model_fields.values()))
    return hint


def test_quality_rules_from_a_run_config_reach_the_quality_config():
    from lm_assets.corpus.curation.rules import FAMILIES
    from lm_assets.defs.curation.assets import CuratedShardConfig

    seen = {}

    @dg.asset
    def probe(config: CuratedShardConfig) -> None:
        seen["quality"] = config.curation_config(ToxicityResource()).quality

    rules = {"gopher_quality": {"min_doc_words": 10}, "disabled": ["min_sentences"], "families": ["gopher_quality", "prose"]}
    run_config = {"quality_policy": "rules", "quality_rules": rules}
    assert dg.materialize([probe], run_config={"ops": {"probe": {"config": run_config}}}).success
    quality = seen["quality"]
    assert (quality.min_doc_words, quality.min_sentences, quality.families) == (10, None, ("gopher_quality", "prose"))
    assert field_choices(probe, "quality_rules", "families") == list(FAMILIES)


def test_an_environment_default_says_what_it_is_where_the_definitions_loaded(monkeypatch):
    from lm_assets.defs.common.environment import unset_means

    monkeypatch.delenv("LM_ASSETS_QUALITY_POLICY", raising=False)
    assert unset_means("LM_ASSETS_QUALITY_POLICY", "classifier") == (
        "unset: $LM_ASSETS_QUALITY_POLICY, else classifier; here: classifier ($LM_ASSETS_QUALITY_POLICY is not set)")
    monkeypatch.setenv("LM_ASSETS_QUALITY_POLICY", "rules")
    assert unset_means("LM_ASSETS_QUALITY_POLICY", "classifier").endswith("here: rules (from $LM_ASSETS_QUALITY_POLICY)")
    with pytest.raises(KeyError):
        unset_means("LM_ASSETS_NOT_READ", "x")


def test_the_launchpad_shows_the_effective_environment_defaults():
    from lm_assets.defs.curation.assets import CuratedShardConfig
    from lm_assets.defs.evaluation.assets import CevalScoreConfig
    from lm_assets.defs.tokens.assets import PackedDatasetConfig, TokenizerTrainingConfig
    from lm_assets.defs.training.assets import TrainingLauncher

    for cls, name in [(CuratedShardConfig, "quality_policy"), (ToxicityResource, "backend"),
                      (ToxicityResource, "detoxify_checkpoint"), (TokenizerTrainingConfig, "vocab_size"),
                      (PackedDatasetConfig, "seq_len"), (CevalScoreConfig, "ceval_path"), (TrainingLauncher, "backend")]:
        assert "; here: " in cls.model_fields[name].description, (cls.__name__, name)
