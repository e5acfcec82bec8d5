import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lm_assets.corpus.tokens.packing import PackingConfig, pack, write_packed
from tests.corpus.tokens.test_packing import make_shard
from lm_assets.training.data import IGNORE_INDEX, PackedDataset, batch_indices, permute

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    rng = np.random.default_rng(0)
    shards = [make_shard("a", 120, rng, max_len=50), make_shard("b", 80, rng, max_len=50)]
    out = tmp_path_factory.mktemp("packed")
    write_packed(pack(shards, PackingConfig(seq_len=33, strategy="bfd", val_fraction=0.1, seed=1)), out)
    return out


def test_permutation_is_a_bijection_for_any_size():
    for n in (1, 2, 3, 7, 64, 65, 1000, 4099):
        for seed in (0, 1, 12345):
            assert np.array_equal(np.sort(permute(np.arange(n), n, seed)), np.arange(n))
    assert not np.array_equal(permute(np.arange(100), 100, 0), permute(np.arange(100), 100, 1))
    assert not np.array_equal(permute(np.arange(100), 100, 0), np.arange(100))


def test_resume_reproduces_the_uninterrupted_run(packed):
    ds = PackedDataset(packed, "train", seed=7)
    dp_size, mbs, steps = 2, 4, 50  # more than two epochs of len(ds) sequences
    assert steps * dp_size * mbs > 2 * len(ds)
    uninterrupted = [[ds.get_batch(s, r, dp_size, mbs) for r in range(dp_size)] for s in range(steps)]
    k = 23
    resumed_ds = PackedDataset(packed, "train", seed=7)  # a fresh process knows only the step
    for s in range(k, steps):
        for r in range(dp_size):
            x, y = resumed_ds.get_batch(s, r, dp_size, mbs)
            assert torch.equal(x, uninterrupted[s][r][0]) and torch.equal(y, uninterrupted[s][r][1])
    # and a different seed gives different batches
    other = PackedDataset(packed, "train", seed=8)
    assert not all(torch.equal(other.get_batch(s, 0, dp_size, mbs)[0], uninterrupted[s][0][0]) for s in range(5))


def test_dp_ranks_partition_each_global_batch():
    n, seed, mbs, dp = 50, 3, 4, 3
    for step in range(30):
        parts = [batch_indices(n, seed, step, r, dp, mbs) for r in range(dp)]
        whole = batch_indices(n, seed, step, 0, 1, mbs * dp)  # the global batch, one rank
        assert np.array_equal(np.concatenate(parts), whole)
        # ranks never share a stream position; within one epoch they never share a sequence
        positions = np.arange(step * mbs * dp, (step + 1) * mbs * dp)
        if len(np.unique(positions // n)) == 1:
            assert len(np.unique(whole)) == len(whole)


def test_epochs_roll_over_with_new_permutations():
    n, seed = 10, 5
    stream = np.concatenate([batch_indices(n, seed, s, 0, 1, 4) for s in range(10)])  # 40 positions = 4 epochs
    epochs = stream.reshape(4, n)
    for e, epoch in enumerate(epochs):
        assert sorted(epoch) == list(range(n))  # each epoch visits every sequence once
        assert np.array_equal(epoch, permute(np.arange(n), n, seed + e))  # keyed by seed + epoch
    assert len({tuple(e) for e in epochs}) == 4
    # step 2 spans the boundary: positions 8..11 = end of epoch 0, start of epoch 1
    assert batch_indices(n, seed, 2, 0, 1, 4).tolist() == epochs[0, 8:].tolist() + epochs[1, :2].tolist()


def test_get_batch_shapes_shift_and_padding_mask(packed):
    ds = PackedDataset(packed, "train")
    assert ds.dtype == np.dtype("<u2") and ds.seq_len == 33
    x, y = ds.get_batch(step=3, dp_rank=1, dp_size=2, micro_batch_size=4)
    assert x.dtype == torch.int64 and y.dtype == torch.int64 and x.shape == y.shape == (4, 32)
    idx = ds.batch_indices(3, 1, 2, 4)
    rows = np.asarray(ds.data[idx], dtype=np.int64)
    assert np.array_equal(x.numpy(), rows[:, :-1])
    expected = rows[:, 1:].copy()
    expected[expected == ds.pad_id] = IGNORE_INDEX
    assert np.array_equal(y.numpy(), expected)
    # bfd output has padding, and padded targets are ignored
    all_y = torch.cat([ds.get_batch(s, 0, 1, 8)[1] for s in range(len(ds) // 8 + 1)])
    assert (all_y == IGNORE_INDEX).any() and not (all_y == ds.pad_id).any()


def test_dataset_checks_the_file_against_the_manifest(packed, tmp_path):
    for f in packed.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    assert len(PackedDataset(tmp_path, "val")) > 0
    with open(tmp_path / "val.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(ValueError, match="bytes"):
        PackedDataset(tmp_path, "val")
    with pytest.raises(KeyError):
        PackedDataset(tmp_path, "test")


def _imports(module: str) -> set[str]:
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    return imported


def test_training_data_imports_only_numpy_torch_and_stdlib():
    # lm_assets.training.primitives is allowed because it, in turn, imports only numpy and the standard library.
    imported = {name.split(".")[0] for name in _imports("lm_assets.training.data") - {"lm_assets.training.primitives"}}
    assert imported - set(sys.stdlib_module_names) <= {"__future__", "numpy", "torch"}, imported
    primitives = {name.split(".")[0] for name in _imports("lm_assets.training.primitives")}
    assert primitives <= {"numpy"} | set(sys.stdlib_module_names), primitives


def test_the_prefetcher_hands_out_each_steps_batches_in_order():
    from lm_assets.training.data import StepPrefetcher

    made = []

    def make(step):
        made.append(step)
        return [step * 10]

    for workers in (0, 2):
        made.clear()
        loader = StepPrefetcher(make, 3, num_workers=workers, depth=2)
        assert [loader.get(step)[0] for step in (3, 4, 5)] == [[30], [40], [50]]
        with pytest.raises(ValueError, match="asked for step 7, the next is 6"):
            loader.get(7)
        loader.close()
        assert set(made) >= {3, 4, 5}
        if workers == 0:
            assert made == [3, 4, 5]  # made when asked for, none ahead
