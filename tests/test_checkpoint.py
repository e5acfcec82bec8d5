"""`training.checkpoint.CheckpointManager` in-process, with a stand-in for the DeepSpeed engine.

The real engines' save and resume are covered by the multi-process runs in
`tests/test_training_parallel.py` and `tests/test_checkpoint_safety.py`; these tests pin the
manager's own contract: the files it writes, that `latest` comes last, that `resume` hands back
the saved state and RNGs without touching a trainer, and that a changed layout is refused.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from training import checkpoint
from training.checkpoint import CheckpointManager, latest_tag, run_layout
from training.config import ModelConfig, ParallelDims


class FakeEngine:
    """Keeps `client_state` in one file per tag, as DeepSpeed's engines do among their own."""

    def save_checkpoint(self, save_dir, tag, client_state, save_latest):
        assert save_latest is False  # the manager writes `latest` itself, after the barrier
        torch.save(client_state, Path(save_dir) / tag / "client_state.pt")

    def load_checkpoint(self, load_dir, tag):
        path = Path(load_dir) / tag
        return str(path), torch.load(path / "client_state.pt", weights_only=True)


@pytest.fixture(autouse=True)
def no_process_group(monkeypatch):
    monkeypatch.setattr(checkpoint.dist, "barrier", lambda: None)


def manager(folder: Path, dp: int = 1) -> CheckpointManager:
    layout = run_layout(ParallelDims(pp=1, tp=1, dp=dp), dp, ModelConfig(dim=32, n_layers=2, n_heads=2, vocab_size=64))
    return CheckpointManager(folder=folder, engine=FakeEngine(), rank=0, layout=layout,
                             train_config={"steps": 10}, ds_config={"zero_optimization": {"stage": 0}})  # fmt: skip


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


def test_resume_refuses_a_changed_layout(tmp_path):
    manager(tmp_path).save(1, {"step": 1}, {})
    with pytest.raises(ValueError, match="resume needs it"):
        manager(tmp_path, dp=2).resume()
