"""ZeRO-Offload on two CPU ranks. Apart from the other training tests because DeepSpeed builds its CPU
Adam op at the first use (a minute or more), so that the tests can run beside it."""

import pytest

from tests.training.test_training_parallel import base, losses, run_ok, write_packed


def test_zero3_with_the_optimizer_and_parameters_offloaded_to_the_host_trains(tmp_path):
    """DeepSpeed's ZeRO-3 offload as its docs configure it, on two data-parallel ranks: the config says so,
    the run trains, and its losses follow the run without offload (CPU Adam against torch's AdamW)."""
    import json

    from lm_assets.training.config import load_config
    from lm_assets.training.engine import deepspeed_config

    cfg = load_config(None, ["zero_stage=3", "offload.optimizer=cpu", "offload.param=cpu"])
    zero = deepspeed_config(cfg, 2)["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True} == zero["offload_param"]
    for bad, reason in ((["offload.optimizer=cpu", "parallel.pp=2", "zero_stage=1"], "pipeline parallelism"),
                        (["offload.param=cpu", "zero_stage=2"], "needs ZeRO stage 3"),
                        (["offload.optimizer=nvme", "zero_stage=3"], "nvme_path")):  # fmt: skip
        with pytest.raises(ValueError, match=reason):
            load_config(None, bad).validate()
    data = write_packed(tmp_path / "packed")
    settings = {"parallel.dp": 2, "zero_stage": 3}
    offloaded = run_ok(2, base(data, 4, micro_batch_size=2, **settings, **{
        "offload.optimizer": "cpu", "offload.param": "cpu", "checkpoint.dir": tmp_path / "offload"}))
    plain = run_ok(2, base(data, 4, micro_batch_size=2, **settings))
    saved = json.loads(next((tmp_path / "offload").glob("step_*/ds_config.json")).read_text())
    assert saved["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert losses(offloaded) == pytest.approx(losses(plain), rel=1e-3)
