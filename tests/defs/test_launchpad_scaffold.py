"""The Launchpad's scaffold launches: for every job, and for every asset as its Materialize button opens the
Launchpad, the config the UI writes ("All defaults expanded", from Dagster's `rootDefaultYaml`), joined to a
partition's run config and written out as the UI writes it, is checked by Dagster's own GraphQL
`isRunConfigValid`, which reads the text with PyYAML."""

import re
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import in_process_test_workspace
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._utils.merger import deep_merge_dicts
from dagster_graphql.test.utils import execute_dagster_graphql

ROOT = Path(__file__).resolve().parents[2]

SCAFFOLD_AND_VALIDATE = """
query Scaffold($selector: PipelineSelector!, $runConfigData: RunConfigData) {
  runConfigSchemaOrError(selector: $selector) {
    __typename
    ... on RunConfigSchema {
      rootDefaultYaml
      isRunConfigValid(runConfigData: $runConfigData) {
        __typename
        ... on RunConfigValidationInvalid { errors { message } }
        ... on PythonError { message }
      }
    }
    ... on PythonError { message }
  }
}
"""
SCAFFOLD = """
query Scaffold($selector: PipelineSelector!) {
  runConfigSchemaOrError(selector: $selector) {
    __typename
    ... on RunConfigSchema { rootDefaultYaml }
    ... on PythonError { message }
  }
}
"""



class UiYamlDumper(yaml.SafeDumper):
    """YAML as the UI writes it: the JavaScript `yaml` package follows YAML 1.2, where only true and false are
    booleans, so it leaves a key such as `off` unquoted; PyYAML on the server reads YAML 1.1, where `off` is
    the boolean false."""


UiYamlDumper.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeDumper.yaml_implicit_resolvers.items()
}
UiYamlDumper.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))


def as_the_ui_writes(run_config: dict) -> str:
    return yaml.dump(run_config, Dumper=UiYamlDumper, sort_keys=False)


def test_the_ui_writes_yaml_1_1_booleans_unquoted():
    assert as_the_ui_writes({"off": [], "on": "yes", "flag": True}) == "off: []\non: yes\nflag: true\n"
    assert yaml.safe_load(as_the_ui_writes({"off": []})) == {False: []}


@pytest.fixture(scope="module")
def workspace():
    with dg.instance_for_test() as instance:
        origin = LoadableTargetOrigin(module_name="lm_assets.definitions", working_directory=str(ROOT))
        with in_process_test_workspace(instance, origin) as context:
            yield context


def launchpads(context) -> list[tuple[str, dict]]:
    """(what the user opened, the GraphQL selector) for every named job and every asset's Materialize button."""
    location = next(iter(context.code_locations))
    repository = next(iter(location.get_repositories().values()))
    base = {"repositoryLocationName": location.name, "repositoryName": repository.name}
    opened = [(f"job {job.name}", base | {"pipelineName": job.name})
              for job in repository.get_all_jobs() if not job.name.startswith("__ASSET_JOB")]
    for node in repository.asset_graph.asset_nodes:
        if node.is_materializable:
            # A multi-asset that cannot be split is materialized whole, as the UI selects it.
            keys = sorted(node.execution_set_asset_keys or {node.key}, key=lambda key: key.to_user_string())
            selection = [{"path": list(key.path)} for key in keys]
            opened.append((f"asset {node.key.to_user_string()}",
                           base | {"pipelineName": "__ASSET_JOB", "assetSelection": selection}))
    return opened


def partition_run_config(job_name: str | None, asset: str | None) -> dict:
    """The run config the Launchpad joins in when a partition is picked (an asset job's is empty, but a
    partitioned config would add to it)."""
    from lm_assets.definitions import defs

    job = defs.resolve_implicit_global_asset_job_def() if job_name is None else defs.resolve_job_def(job_name)
    partitions = job.partitions_def if asset is None else defs.resolve_assets_def(asset).partitions_def
    if partitions is None or job.partitioned_config is None:
        return {}
    return job.partitioned_config.get_run_config_for_partition_key("a-partition")


def test_every_launchpad_scaffold_is_valid_as_the_ui_reads_it(workspace):
    opened = launchpads(workspace)
    assert len(opened) > 30 and any(name == "asset curated_shard" for name, _ in opened)
    invalid = {}
    for name, selector in opened:
        scaffold = execute_dagster_graphql(workspace, SCAFFOLD, {"selector": selector}).data["runConfigSchemaOrError"]
        assert scaffold["__typename"] == "RunConfigSchema", (name, scaffold)
        job_name = None if selector["pipelineName"] == "__ASSET_JOB" else selector["pipelineName"]
        asset = name.split(" ", 1)[1] if job_name is None else None
        launchpad = deep_merge_dicts(yaml.safe_load(scaffold["rootDefaultYaml"]) or {}, partition_run_config(job_name, asset))
        launchpad_yaml = as_the_ui_writes(launchpad)
        # The UI sends the Launchpad's text as it stands, and the server reads it with PyYAML.
        result = execute_dagster_graphql(workspace, SCAFFOLD_AND_VALIDATE,
                                         {"selector": selector, "runConfigData": launchpad_yaml})
        verdict = (result.data or {}).get("runConfigSchemaOrError") or {}
        if result.errors or verdict.get("isRunConfigValid", {}).get("__typename") != "PipelineConfigValidationValid":
            invalid[name] = result.errors or verdict
    assert invalid == {}


def keys_and_values(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from keys_and_values(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from keys_and_values(inner)
    else:
        yield value


def test_no_field_name_or_choice_is_a_yaml_boolean(workspace):
    from dagster._config import ConfigTypeKind

    from lm_assets.definitions import defs

    words = set()
    for job in [defs.resolve_implicit_global_asset_job_def(), *defs.resolve_all_job_defs()]:
        stack = [job.run_config_schema.config_type]
        seen = set()
        while stack:
            config_type = stack.pop()
            if config_type.key in seen:
                continue
            seen.add(config_type.key)
            if config_type.kind == ConfigTypeKind.ENUM:
                words |= {value.config_value for value in config_type.enum_values}
            for field in (getattr(config_type, "fields", None) or {}).values():
                stack.append(field.config_type)
            words |= set(getattr(config_type, "fields", None) or {})
            stack += [t for t in getattr(config_type, "type_params", None) or [] if t is not None]
            if inner := getattr(config_type, "inner_type", None):
                stack.append(inner)
    assert {"quality_rules", "disabled", "classifier"} <= words
    # PyYAML reads YAML 1.1's on, off, yes, no, true and false (any case), unquoted, as booleans.
    read_back = {w: next(iter(yaml.safe_load(f"{w}: {w}").items())) for w in words if isinstance(w, str)}
    assert sorted(w for w, pair in read_back.items() if pair != (w, w)) == []


def test_the_quality_rules_scaffold_arrives_as_strings(workspace):
    (_, selector), = [item for item in launchpads(workspace) if item[0] == "asset curated_shard"]
    scaffold = execute_dagster_graphql(workspace, SCAFFOLD, {"selector": selector}).data["runConfigSchemaOrError"]
    config = yaml.safe_load(scaffold["rootDefaultYaml"])
    rules = config["ops"]["curated_shard"]["config"]["quality_rules"]
    assert "disabled" in rules and all(isinstance(key, str) for key in keys_and_values(rules) if key is not None)


def test_the_scaffold_writes_the_choices_an_unset_field_would_take(workspace):
    from lm_assets.defs.common.environment import loaded_default

    (_, selector), = [item for item in launchpads(workspace) if item[0] == "asset curated_shard"]
    scaffold = execute_dagster_graphql(workspace, SCAFFOLD, {"selector": selector}).data["runConfigSchemaOrError"]
    scaffolded = yaml.safe_load(scaffold["rootDefaultYaml"])
    config = scaffolded["ops"]["curated_shard"]["config"]
    assert config["quality_policy"] == loaded_default("LM_ASSETS_QUALITY_POLICY", "classifier")
    # The toxicity model is a resource, in the scaffold beside the ops; its backend, unset, is read when the run
    # starts, and its description says what that is here.
    assert set(config["toxicity"]) == {"line_threshold", "max_toxic_fraction", "zh_max_flagged_ratio"}
    assert scaffolded["resources"]["toxicity"]["config"] == {"detoxify_model_type": "original", "device": "auto",
                                                             "prescreen_threshold": 0.05}


SAMPLE_LAUNCHPAD = """
import json
from lm_assets.defs.sft.assets import SftDatasetConfig, SftRunConfig
from lm_assets.defs.sft.assets import DpoRunConfig
from lm_assets.defs.compression.distillation import DistillRunConfig
from lm_assets.defs.tokens.assets import PackedDatasetConfig, TokenizerTrainingConfig
from lm_assets.defs.training.assets import TrainingLauncher, TrainingRunConfig
fields = lambda cls: {name: field.default for name, field in cls.model_fields.items()}
print(json.dumps({"training_run": fields(TrainingRunConfig), "sft_run": fields(SftRunConfig), "dpo_run": fields(DpoRunConfig),
                  "distill_run": fields(DistillRunConfig), "sft_dataset": fields(SftDatasetConfig),
                  # Unset in the schema, they take the profile's when a run starts.
                  "tokenizer": TokenizerTrainingConfig().model_dump(), "packed_dataset": PackedDatasetConfig().model_dump(),
                  "steps": TrainingRunConfig.model_fields["steps"].description,
                  "cluster": TrainingLauncher.model_fields["cluster"].default is None}, default=str))
"""


@pytest.mark.parametrize("profile", ["", "sample"])
def test_the_launchpad_offers_what_the_demo_ran_under_make_ui(profile):
    """`make ui` sets $LM_ASSETS_LAUNCHPAD_DEFAULTS=sample: the defaults of the ops the sample profile sets (the
    tokenizer's vocabulary, both sequence lengths, training, fine-tuning and alignment) are then what `make demo`
    ran; unset, the code's own. A local run's scaffold has no Kubernetes block."""
    import json
    import os
    import subprocess
    import sys

    from lm_assets.app.local_run import DEMO_RUN_CONFIG
    from lm_assets.defs.common.sample_defaults import SAMPLE_PROFILE
    from lm_assets.training.config import TrainConfig

    env = {key: value for key, value in os.environ.items() if key not in ("LM_ASSETS_VOCAB_SIZE", "LM_ASSETS_SEQ_LEN")}
    env["LM_ASSETS_LAUNCHPAD_DEFAULTS"] = profile
    out = subprocess.run([sys.executable, "-c", SAMPLE_LAUNCHPAD], env=env, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["cluster"]
    ops = ("training_run", "sft_run", "dpo_run", "distill_run", "sft_dataset", "tokenizer", "packed_dataset")
    assert {op for op in SAMPLE_PROFILE if op != "toxicity"} == set(ops)
    for op in ops:
        profiled = SAMPLE_PROFILE[op]
        assert {name: DEMO_RUN_CONFIG["ops"][op]["config"][name] for name in profiled} == profiled  # the demo runs it
        offered = {name: seen[op][name] for name in profiled}
        assert (offered == profiled) == (profile == "sample"), (op, offered, profiled)
    if profile:
        assert "as `make demo` ran" in seen["steps"] and seen["sft_run"]["pp"] == 1
    else:
        assert seen["training_run"]["steps"] == TrainConfig().steps and "make demo" not in seen["steps"]
        assert seen["sft_dataset"]["seq_len"] == 1025 and seen["tokenizer"]["vocab_size"] == 32000
