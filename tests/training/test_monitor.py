"""lm_assets/training/monitor.py: TensorBoard events per step, a progress line every few steps, averages without
the warm-up steps, the loss and lr curves as a PNG."""

import struct

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lm_assets.training.monitor import NO_PEAK_FLOPS, RunMonitor


def metrics(step: int, mfu=None) -> dict:
    return {"step": step, "loss": 10.0 - step / 2, "lr": 1e-3 * min(1.0, step / 2), "grad_norm": 1.0,
            "tokens_per_s": 100.0 if step <= 2 else 1000.0, "step_time_s": 0.5 if step <= 2 else 0.1, "mfu": mfu}


def test_events_progress_lines_averages_and_curves(tmp_path):
    lines = []
    monitor = RunMonitor(tmp_path / "tb", total_steps=12, warmup_steps=2, log_every=5, print_line=lines.append)
    for step in range(1, 13):
        monitor.step(metrics(step))
    monitor.close()
    assert [line.split()[1] for line in lines] == ["1/12", "5/12", "10/12", "12/12"]
    assert lines[-1].startswith("step 12/12  loss 4.0000  tokens/s 1,000  eta 0 s")
    summary = monitor.summary()
    assert summary["tokens_per_s_mean"] == 1000.0 and abs(summary["step_time_s_mean"] - 0.1) < 1e-12
    assert summary["steps_averaged"] == 10 and summary["warmup_steps_left_out"] == 2
    assert summary["mfu_mean"] == NO_PEAK_FLOPS and summary["first_step_s"] == 0.5

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(s, 10.0 - s / 2) for s in range(1, 13)]
    assert "train/mfu" not in events.Tags()["scalars"]  # None is not written as a number

    png = monitor.plot(tmp_path / "curves.png")
    header = png.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (700, 500)


def test_mfu_is_averaged_when_known_and_nothing_is_written_without_a_folder(tmp_path):
    monitor = RunMonitor(None, total_steps=4, warmup_steps=1, log_every=10, print_line=lambda line: None)
    for step, mfu in zip(range(1, 5), [0.9, 0.2, 0.3, 0.4]):
        monitor.step(metrics(step, mfu))
    assert abs(monitor.summary()["mfu_mean"] - 0.3) < 1e-12
    assert list(tmp_path.iterdir()) == []
    assert RunMonitor(None, total_steps=1, print_line=lambda line: None).plot(tmp_path / "none.png") is None


def test_dpo_figures_reach_tensorboard_and_the_progress_line(tmp_path):
    lines = []
    monitor = RunMonitor(tmp_path / "tb", total_steps=2, log_every=1, print_line=lines.append)
    dpo = {"reward_accuracy": 0.75, "reward_margin": 0.125, "chosen_reward": 0.1, "rejected_reward": -0.025,
           "chosen_logp": -30.0, "rejected_logp": -31.0}
    monitor.step(metrics(1) | dpo)
    monitor.step(metrics(2) | dpo | {"val_loss": 0.6, "val_reward_accuracy": 0.5, "val_kl": 0.25})
    monitor.close()
    assert "reward acc 0.75 margin 0.125" in lines[0] and "val" not in lines[0]
    assert "val_loss 0.6000  reward acc 0.75 margin 0.125  val reward acc 0.50 kl 0.2500" in lines[1]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/reward_margin")] == [0.125, 0.125]
    assert [(e.step, e.value) for e in events.Scalars("val/kl")] == [(2, 0.25)]
    assert [(e.step, e.value) for e in events.Scalars("val/reward_accuracy")] == [(2, 0.5)]
