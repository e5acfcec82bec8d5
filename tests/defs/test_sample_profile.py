"""The sample crawl's profile has one home, lm_assets/defs/common/sample_defaults.py: `make demo` and `make ui` both
select it, and neither the Makefile nor the demo's modules repeat its values."""

import re
from pathlib import Path

from lm_assets.defs.common.sample_defaults import DEMO_ONLY, SAMPLE_PROFILE, demo_run_config

PROJECT = Path(__file__).resolve().parents[2]


def profile_values() -> set[str]:
    values = set()
    for settings in (*SAMPLE_PROFILE.values(), *DEMO_ONLY.values()):
        for value in settings.values():
            for item in value if isinstance(value, list) else [value]:
                # Names that read as settings (profanity_check, a path), not words a comment may use ("tiny").
                if (isinstance(item, str) and re.search(r"[_/]", item)) or (isinstance(item, (int, float)) and abs(item) >= 100):
                    values.add(str(item))
    return values


def test_the_makefile_and_the_demo_carry_no_profile_values():
    makefile = (PROJECT / "Makefile").read_text()
    # It selects the profile by name, and sets none of the variables a profile's setting could come from.
    assert not re.search(r"LM_ASSETS_(VOCAB_SIZE|SEQ_LEN|TOXICITY_BACKEND)=", makefile)
    app = PROJECT / "lm_assets" / "app"
    sources = {path: path.read_text() for path in [PROJECT / "Makefile", app / "local_run.py", app / "demo.py"]}
    for value in profile_values():
        for path, source in sources.items():
            assert not re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.])", source), f"{path.name} repeats the profile's {value}"


def test_the_demo_runs_the_profile():
    ops = demo_run_config()["ops"]
    for op, settings in {**SAMPLE_PROFILE, **DEMO_ONLY}.items():
        if op == "toxicity":
            assert op not in ops  # a resource: the runs take it from the selected profile
            continue
        assert {name: ops[op]["config"][name] for name in settings} == settings
    # sft_dataset's sequences are as long as the pretraining ones, in the demo and in the Launchpad alike.
    assert ops["sft_dataset"]["config"]["seq_len"] == ops["packed_dataset"]["config"]["seq_len"]


def test_the_toxicity_backend_comes_from_the_variable_else_the_profile_when_a_run_starts(monkeypatch):
    """The one toxicity resource that curated_shard, continuation_scores and safety_score share reads its backend
    when a run uses it, not when the code was imported; a backend set on the resource comes first."""
    from lm_assets.definitions import defs
    from lm_assets.defs.common.toxicity import ToxicityResource

    resource = defs.resources["toxicity"]
    assert isinstance(resource, ToxicityResource)
    monkeypatch.delenv("LM_ASSETS_TOXICITY_BACKEND", raising=False)
    monkeypatch.setenv("LM_ASSETS_LAUNCHPAD_DEFAULTS", "sample")
    assert resource.settings()["backend"] == SAMPLE_PROFILE["toxicity"]["backend"]
    monkeypatch.setenv("LM_ASSETS_TOXICITY_BACKEND", "detoxify")
    assert resource.settings()["backend"] == "detoxify"
    assert ToxicityResource(backend="profanity_check").settings()["backend"] == "profanity_check"
    monkeypatch.delenv("LM_ASSETS_TOXICITY_BACKEND")
    monkeypatch.setenv("LM_ASSETS_LAUNCHPAD_DEFAULTS", "")
    assert resource.settings()["backend"] == "auto"
