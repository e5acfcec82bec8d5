"""Environment defaults are read when a run or resource needs them, and relative paths resolve against
the project folder, whatever the working directory."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]

LATE_ENVIRONMENT = textwrap.dedent("""
    import json, os
    import lm_assets.definitions as location
    from lm_assets.defs.evaluation.assets import CevalScoreConfig, MmluScoreConfig
    from lm_assets.defs.decontam.assets import DecontaminatedShardConfig
    from lm_assets.defs.tokens.assets import PackedDatasetConfig, TokenizerTrainingConfig

    # Set only after the code location was imported.
    os.environ.update({
        "LM_ASSETS_STORAGE_ROOT": "/srv/late/storage", "LM_ASSETS_LANDING_ROOT": "late-landing",
        "LM_ASSETS_VOCAB_SIZE": "4000", "LM_ASSETS_SEQ_LEN": "257", "LM_ASSETS_TOXICITY_BACKEND": "profanity_check",
        "LM_ASSETS_TRAINING_BACKEND": "kubernetes", "LM_ASSETS_S3_ENDPOINT_URL": "http://127.0.0.1:9",
    })
    resources = location.defs.resources
    print(json.dumps({
        "storage": resources["storage"].storage().root,
        "landing": resources["landing"].storage().root,
        "backend": resources["training_launcher"].backend_name(),
        "endpoint": resources["storage"].s3.get_client().meta.endpoint_url,
        "vocab_size": TokenizerTrainingConfig().vocab_size,
        "seq_len": PackedDatasetConfig().seq_len,
        "toxicity": resources["toxicity"].settings()["backend"],
        "decontam_mmlu": DecontaminatedShardConfig().mmlu_path,
        "mmlu": MmluScoreConfig().mmlu_path,
        "ceval": CevalScoreConfig().ceval_path,
        "no_mmlu": DecontaminatedShardConfig(mmlu_path="").mmlu_path,
    }))
""")


def test_defaults_are_read_at_run_time_and_resolve_against_the_project(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_DEFAULT_REGION": "us-east-1"}
    out = subprocess.run(
        [sys.executable, "-c", LATE_ENVIRONMENT], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    seen = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert seen == {
        "storage": "/srv/late/storage",
        "landing": str(PROJECT / "late-landing"),
        "backend": "kubernetes",
        "endpoint": "http://127.0.0.1:9",
        "vocab_size": 4000,
        "seq_len": 257,
        "toxicity": "profanity_check",
        "decontam_mmlu": str(PROJECT / "data/eval/mmlu.zip"),
        "mmlu": str(PROJECT / "data/eval/mmlu.zip"),
        "ceval": str(PROJECT / "data/eval/ceval-sample"),
        "no_mmlu": "",
    }
    assert Path(seen["mmlu"]).exists() and Path(seen["ceval"]).exists()


def test_unset_defaults_and_the_project_folder_override(tmp_path):
    script = textwrap.dedent("""
        import json
        from lm_assets.defs.common.resources import default_resources
        from lm_assets.defs.tokens.assets import TokenizerTrainingConfig
        r = default_resources()
        print(json.dumps([r["storage"].storage().root, r["landing"].storage().root, TokenizerTrainingConfig().vocab_size]))
    """)
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = lambda env: __import__("json").loads(subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout)
    assert run(base) == [str(PROJECT / "storage"), str(PROJECT / "data/sample-crawl"), 32000]
    assert run({**base, "LM_ASSETS_PROJECT_DIR": "/opt/lm-assets"}) == ["/opt/lm-assets/storage", "/opt/lm-assets/data/sample-crawl", 32000]


def test_every_setting_variable_is_registered_read_one_way_and_documented():
    from lm_assets.defs.common.environment import VARIABLES, from_environment

    root = Path(__file__).resolve().parents[2]
    source = "\n".join(p.read_text() for p in (root / "lm_assets").rglob("*.py"))
    named = set(re.findall(r"LM_ASSETS_[A-Z0-9_]+", source))
    # The launcher's variables for the training program, not settings of the code location.
    assert named - set(VARIABLES) == {"LM_ASSETS_ERROR_DIR", "LM_ASSETS_PIPES_MESSAGES"}
    defs_source = "\n".join(p.read_text() for p in (root / "lm_assets" / "defs").rglob("*.py"))
    reads = re.findall(r"os\.environ(?:\.get)?\(?\[?\"([A-Z_]+)", defs_source)
    assert not set(reads) & set(VARIABLES), "read a setting with from_environment"
    reference = (root / "docs" / "configuration.md").read_text()
    assert [v for v in VARIABLES if v.startswith("LM_ASSETS_") and f"`{v}`" not in reference] == []
    with pytest.raises(KeyError, match="LM_ASSETS_TYPO is not one of the environment variables"):
        from_environment(None, "LM_ASSETS_TYPO")


def test_each_registered_default_has_one_home():
    """The registry holds the defaults of the data paths (and the other variables it records a default for):
    no other module of the code location (lm_assets/defs, lm_assets/app) spells them, so a default changes in
    one place."""
    from lm_assets.defs.common.environment import VARIABLES, Variable, default_of, from_environment

    root = Path(__file__).resolve().parents[2]
    assert all(isinstance(entry, Variable) for entry in VARIABLES.values())
    paths = {name: entry.default for name, entry in VARIABLES.items()
             if isinstance(entry.default, str) and name.endswith(("_ROOT", "_PATH", "_DIR"))}
    spellable = [default for default in paths.values() if "/" in default]  # "storage" is also a resource's key
    assert set(paths) >= {"LM_ASSETS_STORAGE_ROOT", "LM_ASSETS_LANDING_ROOT", "LM_ASSETS_MMLU_PATH", "LM_ASSETS_CEVAL_PATH",
                          "LM_ASSETS_EVAL_TASKS_DIR", "LM_ASSETS_SAFETY_DIR", "LM_ASSETS_BIAS_DIR"}
    registry = root / "lm_assets" / "defs" / "common" / "environment.py"
    for path in [*(root / "lm_assets" / "defs").rglob("*.py"), *(root / "lm_assets" / "app").rglob("*.py")]:
        if path == registry:
            continue
        source = path.read_text()
        spelled = [default for default in spellable if f'"{default}"' in source or f"'{default}'" in source]
        assert not spelled, f"{path.relative_to(root)} spells the registry's default {spelled}"
    for name, default in paths.items():
        assert default_of(name) == default
    # Unset and without a fallback of its own, a read takes the registry's default.
    assert from_environment(None, "LM_ASSETS_TRAINING_BACKEND") == default_of("LM_ASSETS_TRAINING_BACKEND") == "local"
