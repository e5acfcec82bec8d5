"""`lm_assets.training.checkpoint.CheckpointManager` in-process, with a stand-in for the DeepSpeed engine.

The real engines' save and resume are covered by the multi-process runs in
`tests/training/test_training_parallel.py` and `tests/training/test_checkpoint_safety.py`; these tests pin the
manager's own contract: the files it writes, that `latest` comes last, that `resume` hands back
the saved state and RNGs without touching a trainer, which checkpoints it refuses, and that a
changed layout goes to `lm_assets.training.reshard` (the resharding itself: `tests/training/test_reshard.py`).
"""

from __future__ import annotations

import json
import logging
import random
import re
from pathlib import Path

import pytest
import torch

from lm_assets.training import checkpoint, reshard
from lm_assets.training.checkpoint import CheckpointManager, latest_tag, run_layout
from lm_assets.training.config import ModelConfig, ParallelDims

MODEL = ModelConfig(dim=32, n_layers=2, n_heads=2, vocab_size=64)


class FakeEngine:
    """Keeps `client_state` in one file per tag, as DeepSpeed's engines do among their own."""

    def __init__(self):
        self.module = torch.nn.Linear(2, 2, bias=False)
        self.optimizer = torch.optim.AdamW(self.module.parameters())
        self.loads = 0

    def save_checkpoint(self, save_dir, tag, client_state, save_latest):
        assert save_latest is False  # the manager writes `latest` itself, after the barrier
        torch.save(client_state, Path(save_dir) / tag / "client_state.pt")

    def load_checkpoint(self, load_dir, tag, load_module_strict=True):
        self.loads += 1
        path = Path(load_dir) / tag
        return str(path), torch.load(path / "client_state.pt", weights_only=True)


@pytest.fixture(autouse=True)
def no_process_group(monkeypatch):
    monkeypatch.setattr(checkpoint.dist, "barrier", lambda: None)


def manager(folder: Path, pp: int = 1, tp: int = 1, dp: int = 1, rank: int = 0, batch: int = 4, stage: int = 0,
            precision: str = "fp32", model: ModelConfig = MODEL) -> CheckpointManager:  # fmt: skip
    layout = run_layout(ParallelDims(pp=pp, tp=tp, dp=dp), pp * tp * dp, model)
    ds_config = {"train_batch_size": batch, "zero_optimization": {"stage": stage},
                 "bf16": {"enabled": precision == "bf16"}, "fp16": {"enabled": precision == "fp16"}}  # fmt: skip
    return CheckpointManager(folder=folder, engine=FakeEngine(), rank=rank, layout=layout,
                             train_config={"steps": 10}, ds_config=ds_config)  # fmt: skip


def test_save_writes_the_layout_then_latest_and_resume_returns_the_state(tmp_path):
    ckpt = manager(tmp_path)
    assert ckpt.resume() is None  # nothing saved yet
    state = {"step": 5, "tokens": 640, "spikes": {"history": [2.5], "consecutive": 0, "total": 0}}
    random.seed(7)
    assert ckpt.save(5, state, {"step": 5, "loss": 2.5}) == "step_00000005"
    expected = random.random()

    path = tmp_path / "step_00000005"
    assert latest_tag(tmp_path) == "step_00000005"
    assert sorted(p.name for p in path.iterdir()) == [
        "client_state.pt", "ds_config.json", "layout.json", "metrics.json", "rng", "train_config.json"]  # fmt: skip
    assert (path / "rng" / "rank_00000.pt").exists()
    assert json.loads((path / "layout.json").read_text()) == ckpt.layout
    assert (path / "train_config.json").read_text() == '{\n  "steps": 10\n}\n'
    assert json.loads((path / "metrics.json").read_text()) == {"loss": 2.5, "step": 5}

    random.seed(0)
    assert manager(tmp_path).resume() == state
    assert random.random() == expected  # the RNGs continue from where they were saved


def test_resume_refuses_another_model_or_global_batch(tmp_path):
    manager(tmp_path, dp=2).save(1, {"step": 1}, {})
    with pytest.raises(ValueError, match="global batch of 4 sequences per step .* this run has 8"):
        manager(tmp_path, dp=2, batch=8).resume()
    with pytest.raises(ValueError, match="holds another model"):
        manager(tmp_path, dp=2, model=ModelConfig(dim=32, n_layers=3, n_heads=2, vocab_size=64)).resume()
    assert manager(tmp_path, dp=2).resume() == {"step": 1}  # unchanged: DeepSpeed's own load


def test_a_changed_layout_resumes_only_with_a_supported_optimizer(tmp_path):
    fp16 = tmp_path / "fp16"
    manager(fp16, pp=2, stage=1, precision="fp16").save(1, {"step": 1}, {})
    with pytest.raises(NotImplementedError, match=r"supports fp32 or bf16 with ZeRO stage 0, 1 or 2; checkpoint .* uses "
                                                  r"fp16 with ZeRO stage 1\. Resume it with the layout"):  # fmt: skip
        manager(fp16, tp=2, stage=1, precision="fp16").resume()
    assert manager(fp16, pp=2, stage=1, precision="fp16").resume() == {"step": 1}  # the same layout still resumes

    fp32 = tmp_path / "fp32"
    manager(fp32, dp=2).save(1, {"step": 1}, {})
    with pytest.raises(NotImplementedError, match="this run uses fp32 with ZeRO stage 3"):
        manager(fp32, dp=2, stage=3).resume()  # same layout, but another optimizer: resharded, and refused


def test_a_changed_layout_is_resharded_and_logged(tmp_path, monkeypatch, caplog):
    """Saved by one rank of pp=2 x dp=2, resumed as ranks 0 and 3 of pp=1 x tp=2 x dp=2: both go
    through `lm_assets.training.reshard`; rank 0 continues its saved RNG stream and logs the change, rank 3
    (no RNG file of that number) seeds from the tag and its rank."""
    manager(tmp_path, pp=2, dp=2, stage=1).save(5, {"step": 5, "tokens": 640}, {})
    random.seed(7)
    manager(tmp_path, pp=2, dp=2, stage=1, rank=0).save(6, {"step": 6, "tokens": 768}, {})
    expected = random.random()
    calls = []

    def consolidate(path, keep):
        calls.append(("consolidate", path.name))
        return reshard.Consolidated({}, {}, None, {}, torch.load(path / "client_state.pt")["trainer"])

    monkeypatch.setattr(reshard, "consolidate", consolidate)
    monkeypatch.setattr(reshard, "load", lambda engine, state, layout, rank: calls.append(("load", rank)))

    random.seed(0)
    with caplog.at_level(logging.INFO, logger="lm_assets.training"):
        ckpt = manager(tmp_path, tp=2, dp=2, stage=1, rank=0)
        assert ckpt.resume() == {"step": 6, "tokens": 768}
    assert random.random() == expected
    assert ckpt.engine.loads == 0  # DeepSpeed's own load never ran
    assert "resumed step 6 from layout pp=2 tp=1 dp=2 (ZeRO-1, fp32) into pp=1 tp=2 dp=2 (ZeRO-1, fp32)" in caplog.text

    draws = []
    for _ in range(2):
        random.seed(0)
        assert manager(tmp_path, tp=2, dp=2, stage=1, rank=3).resume()["step"] == 6
        draws.append(random.random())
    assert draws[0] == draws[1] != expected
    assert calls == [("consolidate", "step_00000006"), ("load", 0)] + [("consolidate", "step_00000006"), ("load", 3)] * 2


def test_latest_names_a_checkpoint_of_this_run_only(tmp_path):
    run, other = tmp_path / "main", tmp_path / "other_run"
    (run / "step_00000002").mkdir(parents=True)
    (other / "step_00000009").mkdir(parents=True)
    assert latest_tag(run) is None
    (run / "latest").write_text("step_00000002\n")
    assert latest_tag(run) == "step_00000002"
    for outside in ("../other_run/step_00000009", str(other / "step_00000009"), "..", "step_00000007"):
        (run / "latest").write_text(outside)
        with pytest.raises(ValueError, match="no checkpoint folder of this run"):
            latest_tag(run)


def write_plain_checkpoint(path: Path, model: ModelConfig = MODEL) -> dict[str, torch.Tensor]:
    """The files `consolidated_state_dict` reads from a one-process checkpoint; returns its weights."""
    from lm_assets.training.model import Transformer

    path.mkdir(parents=True)
    weights = Transformer(model, seed=0).state_dict()
    torch.save({"module": weights}, path / "mp_rank_00_model_states.pt")
    layout = run_layout(ParallelDims(pp=1, tp=1, dp=1), 1, model)
    (path / "layout.json").write_text(json.dumps(layout))
    (path / "ds_config.json").write_text(json.dumps({"train_batch_size": 4, "zero_optimization": {"stage": 0}}))
    return weights


def test_a_tag_folder_linked_to_another_run_is_refused_and_nothing_is_loaded_from_it(tmp_path, monkeypatch):
    run, other = tmp_path / "main", tmp_path / "other_run"
    outside = write_plain_checkpoint(other / "step_00000009")
    assert len(checkpoint.consolidated_state_dict(other, "step_00000009")) == len(outside)  # the other run loads
    run.mkdir()
    (run / "step_00000009").symlink_to(other / "step_00000009", target_is_directory=True)
    (run / "latest").write_text("step_00000009\n")

    loaded = []
    real_load = checkpoint.load_weights_only
    monkeypatch.setattr(checkpoint, "load_weights_only", lambda *a: loaded.append(a) or real_load(*a))
    monkeypatch.setattr("lm_assets.training.checkpoint_files.load_weights_only", lambda *a: loaded.append(a) or real_load(*a))
    refused = re.escape(f"{run / 'latest'} names 'step_00000009'") + ".*outside " + re.escape(str(run))
    with pytest.raises(ValueError, match=refused):
        latest_tag(run)
    for read in (checkpoint.consolidated_state_dict, checkpoint.model_state_dict, checkpoint.model_config):
        with pytest.raises(ValueError, match="outside"):
            read(run)
        with pytest.raises(ValueError, match="outside"):
            read(run, "step_00000009")
    assert loaded == []

    from lm_assets.evaluation.checkpoint import ensure_hf_export

    (other / "step_00000009" / "hf").mkdir()
    (other / "step_00000009" / "hf" / "config.json").write_text("{}")  # an export the other run made
    with pytest.raises(ValueError, match="outside"):
        ensure_hf_export(run, "step_00000009", tmp_path / "tokenizer.model")


def test_a_run_folder_reached_through_a_link_still_reads_its_own_checkpoints(tmp_path):
    weights = write_plain_checkpoint(tmp_path / "real" / "step_00000002")
    (tmp_path / "real" / "latest").write_text("step_00000002\n")
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert latest_tag(tmp_path / "alias") == "step_00000002"
    state = checkpoint.consolidated_state_dict(tmp_path / "alias")
    assert state.keys() == weights.keys() and all(torch.equal(state[k], weights[k].float()) for k in weights)
