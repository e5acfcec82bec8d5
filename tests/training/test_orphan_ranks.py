"""A training job whose launcher dies leaves nothing running, and its `latest` checkpoint whole.

- `torchrun` SIGKILLed mid-run (2 ranks, pipeline-parallel, a checkpoint every step): every rank
  exits, and `latest` names a checkpoint a new job resumes from;
- the Pipes launcher starts its command in a process group of its own and, when the Dagster run is
  interrupted, ends the whole group, even a launcher that ignores SIGINT.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import free_port
from tests.training.test_training_parallel import ROOT, base, launch, write_packed


def alive(pid: int, marker: str) -> bool:
    """`pid` is a running process (not a zombie) whose command line contains `marker`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return marker in cmdline and state not in ("Z", "X")


def processes_with(marker: str) -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and alive(int(p.name), marker)}


def wait_until(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="ranks follow their launcher through Linux's PR_SET_PDEATHSIG")
def test_ranks_die_with_a_killed_torchrun_and_latest_stays_whole(tmp_path):
    data = write_packed(tmp_path / "packed")
    ckpt = tmp_path / "ckpt"
    common = base(data, 100_000, micro_batch_size=2, zero_stage=1, **{"parallel.pp": 2})
    saving = [f"checkpoint.dir={ckpt}", "checkpoint.save_every=1"]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    cmd += ["-m", "lm_assets.training.train", *common, *saving]
    with open(tmp_path / "job.log", "w") as log:
        torchrun = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
    ranks: set[int] = set()
    try:
        started = wait_until(lambda: (ckpt / "latest").exists() or torchrun.poll() is not None, timeout=240)
        assert started and torchrun.poll() is None, (tmp_path / "job.log").read_text()[-4000:]
        ranks = processes_with(str(ckpt)) - {torchrun.pid}
        assert len(ranks) == 2
        torchrun.kill()
        torchrun.wait()
        gone = wait_until(lambda: not any(alive(pid, str(ckpt)) for pid in ranks), timeout=60)
        assert gone, f"ranks {sorted(p for p in ranks if alive(p, str(ckpt)))} outlived their launcher"
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
            torchrun.wait()
        kill_all(p for p in ranks if alive(p, str(ckpt)))

    # Complete means loadable: a job resumes from it (every rank's files, read by DeepSpeed).
    step = int((ckpt / "latest").read_text().strip().removeprefix("step_"))
    resumed = base(data, step + 1, micro_batch_size=2, zero_stage=1, **{"parallel.pp": 2})
    rc, metrics, stderr = launch(2, resumed + saving)
    assert rc == 0, stderr[-4000:]
    assert [m["step"] for m in metrics] == [step + 1]


# A launcher that ignores SIGINT and has a child of its own; it writes both pids, then waits.
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="process groups as Linux has them")
def test_interrupted_run_ends_the_launchers_whole_process_group(tmp_path):
    from lm_assets.defs.training.process_group import run_in_process_group

    pid_file = tmp_path / "pids"

    @dg.asset
    def launched(context: dg.AssetExecutionContext, pipes_subprocess_client: dg.PipesSubprocessClient):
        command = [sys.executable, "-c", STUBBORN, str(pid_file)]
        return run_in_process_group(pipes_subprocess_client, context=context, command=command).get_results()

    seen: dict[str, int] = {}

    def interrupt_once_started():
        if wait_until(pid_file.exists, timeout=60):
            seen["launcher"], seen["child"] = map(int, pid_file.read_text().split())
            seen["group"] = os.getpgid(seen["launcher"])
            os.kill(os.getpid(), signal.SIGINT)  # what terminating the run does to the step

    interrupter = threading.Thread(target=interrupt_once_started)
    interrupter.start()
    try:
        result = dg.materialize(
            [launched],
            resources={"pipes_subprocess_client": dg.PipesSubprocessClient(termination_timeout_seconds=1)},
            raise_on_error=False,
        )
    finally:
        interrupter.join()
        survivors = [seen[k] for k in ("launcher", "child") if k in seen]
        stopped = wait_until(lambda: not any(alive(pid, "time.sleep(600)") for pid in survivors), timeout=30)
        kill_all(survivors)
    assert not result.success
    assert stopped, "the launcher or its child outlived the interrupted run"
    assert seen["group"] == seen["launcher"] != os.getpgrp()
