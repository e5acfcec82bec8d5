"""Reading a checkpoint runs no code from it.

A `.pt` file is a pickle, and unpickling can call any function the file names. The tests write
real checkpoints with the training program, replace one file with a pickle whose `__reduce__` calls
`exec` (the code would create a marker file), and read the checkpoint the way consolidation, the
evaluation assets and a resumed run do: each refuses the file, naming it, and the marker never
appears.
"""

from __future__ import annotations

import pickle
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.training.test_training_parallel import base, launch, run_ok, write_packed
from lm_assets.training.checkpoint import consolidated_state_dict, rng_state, set_rng_state

TAG = "step_00000002"
slow = pytest.mark.slow


class Planted:
    """Unpickles by calling `exec`, which creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def plant(file: Path, marker: Path) -> None:
    assert file.exists(), file
    torch.save({"module": Planted(marker)}, file)


def test_planted_pickle_runs_code_when_loaded_unsafely(tmp_path):
    """The planted file is live: an unrestricted load runs it."""
    marker = tmp_path / "marker"
    file = tmp_path / "states.pt"
    torch.save({}, file)
    plant(file, marker)
    torch.load(file, weights_only=False)
    assert marker.exists()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """Two-step runs saving one checkpoint each: the plain engine (one process), a pipeline (pp=2)
    and ZeRO-3 over two data-parallel ranks."""
    root = tmp_path_factory.mktemp("checkpoints")
    data = write_packed(root / "packed")
    run_ok(1, base(data, 2, micro_batch_size=2, **{"checkpoint.dir": root / "plain"}), launcher="python")
    pipeline = {"parallel.pp": 2, "checkpoint.dir": root / "pipeline"}
    run_ok(2, base(data, 2, micro_batch_size=2, zero_stage=1, **pipeline))
    zero3 = {"parallel.dp": 2, "checkpoint.dir": root / "zero3"}
    run_ok(2, base(data, 2, micro_batch_size=2, zero_stage=3, **zero3))
    return root


def copy_checkpoint(checkpoints: Path, name: str, dest: Path) -> Path:
    shutil.copytree(checkpoints / name, dest)
    return dest


@slow
@pytest.mark.parametrize(
    ("name", "weights_file"),
    [
        ("plain", "mp_rank_00_model_states.pt"),
        ("pipeline", "layer_01-model_00-model_states.pt"),
        ("zero3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    ],
)
def test_consolidation_refuses_a_planted_pickle(checkpoints, tmp_path, name, weights_file):
    ckpt = copy_checkpoint(checkpoints, name, tmp_path / name)
    assert consolidated_state_dict(ckpt, TAG)  # the untouched checkpoint loads
    marker = tmp_path / "marker"
    plant(ckpt / TAG / weights_file, marker)
    with pytest.raises(pickle.UnpicklingError, match=weights_file):
        consolidated_state_dict(ckpt, TAG)
    assert not marker.exists()


@slow
def test_zero3_consolidation_matches_deepspeed(checkpoints):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    ours = consolidated_state_dict(checkpoints / "zero3", TAG)
    theirs = get_fp32_state_dict_from_zero_checkpoint(str(checkpoints / "zero3"), TAG)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key].float()), key


@slow
def test_evaluation_export_refuses_a_planted_pickle(checkpoints, tmp_path):
    """The evaluation assets export a checkpoint without an HF folder before scoring it."""
    from lm_assets.defs.evaluation.common import hf_export

    ckpt = copy_checkpoint(checkpoints, "plain", tmp_path / "checkpoints" / "run")
    shutil.rmtree(ckpt / TAG / "hf")
    marker = tmp_path / "marker"
    plant(ckpt / TAG / "mp_rank_00_model_states.pt", marker)
    store = SimpleNamespace(local_path=lambda key: tmp_path / key)
    with pytest.raises(pickle.UnpicklingError, match="mp_rank_00_model_states.pt"):
        hf_export(store, f"run-{TAG}")
    assert not marker.exists()
    assert not (ckpt / TAG / "hf").exists()


@slow
def test_resume_refuses_a_planted_rng_state(checkpoints, tmp_path):
    ckpt = copy_checkpoint(checkpoints, "plain", tmp_path / "plain")
    marker = tmp_path / "marker"
    plant(ckpt / TAG / "rng" / "rank_00000.pt", marker)
    data = checkpoints / "packed"
    rc, metrics, stderr = launch(1, base(data, 4, micro_batch_size=2, **{"checkpoint.dir": ckpt}), launcher="python")
    assert rc != 0
    assert metrics == []
    assert "UnpicklingError" in stderr and "rank_00000.pt" in stderr, stderr[-4000:]
    assert not marker.exists()


SAME_LAYOUT = {  # how each checkpoint of the fixture was saved: processes, launcher, settings
    "plain": (1, "python", {}),
    "pipeline": (2, "torchrun", {"parallel.pp": 2, "zero_stage": 1}),
    "zero3": (2, "torchrun", {"parallel.dp": 2, "zero_stage": 3}),
}


@slow
@pytest.mark.parametrize(
    ("name", "planted_file"),
    [
        ("plain", "mp_rank_00_model_states.pt"),
        ("pipeline", "layer_01-model_00-model_states.pt"),
        ("pipeline", "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
        ("zero3", "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
    ],
)
def test_a_resume_in_the_same_layout_refuses_a_planted_pickle(checkpoints, tmp_path, name, planted_file):
    """DeepSpeed's own load_checkpoint reads these files; a checkpoint in the run's folder is not trusted."""
    nproc, launcher, settings = SAME_LAYOUT[name]
    data = checkpoints / "packed"
    if name != "plain":  # the untouched checkpoint resumes (the plain one: the resume tests of test_loader)
        intact = copy_checkpoint(checkpoints, name, tmp_path / "intact")
        run_ok(nproc, base(data, 3, micro_batch_size=2, **settings, **{"checkpoint.dir": intact}), launcher=launcher)
    ckpt = copy_checkpoint(checkpoints, name, tmp_path / name)
    marker = tmp_path / "marker"
    plant(ckpt / TAG / planted_file, marker)
    rc, metrics, stderr = launch(nproc, base(data, 3, micro_batch_size=2, **settings, **{"checkpoint.dir": ckpt}),
                                 launcher=launcher)
    assert rc != 0 and metrics == []
    assert "UnpicklingError" in stderr and planted_file in stderr, stderr[-4000:]
    assert not marker.exists()


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.standard_normal(1)  # leaves a cached Gaussian in NumPy's state
    file = tmp_path / "rng.pt"
    torch.save(rng_state(), file)
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3))
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    set_rng_state(torch.load(file, weights_only=True))
    got = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3))
    assert got[:2] == expected[:2] and torch.equal(got[2], expected[2])


def test_a_pickled_or_corrupt_safetensors_file_fails_naming_its_folder_and_file(tmp_path):
    import pickle

    from lm_assets.training.hf_init import read_safetensors

    pickled = tmp_path / "export" / "model.safetensors"
    pickled.parent.mkdir()
    pickled.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
    with pytest.raises(ValueError, match=r"model.safetensors in .*export is not a readable safetensors file"):
        read_safetensors(pickled)
    with pytest.raises(ValueError, match=r"model.safetensors in .*nowhere is not a readable safetensors file"):
        read_safetensors(tmp_path / "nowhere" / "model.safetensors")
