"""`lm-assets serve` run as a command, as an operator runs it: on a checkpoint's export in the storage root, it
answers chat requests (four at once, continuous batching) with the greedy text our own generation gives, and a
Ctrl-C ends it and every process under it (transformers serve alone does not exit on SIGINT). A checkpoint it cannot serve is refused with a clear error."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from lm_assets.app.process_tree import alive, descendants, stop_tree
from lm_assets.serving.endpoint import bound_port, our_answers, served_answers
from lm_assets.storage.layout import checkpoint_run_folder
from tests.compression.test_gguf import export  # noqa: F401 - the fixture: a tiny chat checkpoint's HF export

CHECKPOINT = "sft-step_00000004"
PROMPTS = ["The river flows past", "Every morning the baker", "河水流过", "def area(r):"]
NEW_TOKENS = 12
# Every wait below ends on an event (a line printed, a process exiting); this bound only keeps a hang from
# lasting for ever, so that a loaded machine cannot fail a test that a quiet one passes.
HANG_GUARD_S = 300


def lm_assets(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "lm-assets"), *args]


@pytest.fixture(scope="module")
def storage(export, tmp_path_factory):  # noqa: F811 - the imported fixture
    """A storage root holding the export as the `checkpoints` partition CHECKPOINT, and the environment that
    points the command at it."""
    root = tmp_path_factory.mktemp("serve-storage")
    run, tag = CHECKPOINT.rsplit("-", 1)
    hf = root / checkpoint_run_folder(run) / tag / "hf"
    shutil.copytree(export, hf)
    env = {**os.environ, "LM_ASSETS_STORAGE_ROOT": str(root), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return hf, env


class Served:
    """The command in a session of its own, its output (stdout and stderr) read line by line as it comes;
    `ready` is set at the server's readiness line, or when the output ends (the process exited)."""

    READY = "Uvicorn running on"

    def __init__(self, argv: list[str], env: dict):
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                        start_new_session=True)  # fmt: skip
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if self.READY in line:
                self.ready.set()
        self.ready.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)


def test_serve_answers_chat_requests_as_our_generation_does_and_a_ctrl_c_ends_it(storage):
    from lm_assets.evaluation.checkpoint import load_model

    hf, env = storage
    # Port 0: the kernel's choice, read back from the readiness line (a port chosen here could be taken meanwhile).
    served = Served(lm_assets("serve", "--checkpoint", CHECKPOINT, "--host", "127.0.0.1", "--port", "0"), env)
    try:
        assert served.ready.wait(HANG_GUARD_S), f"no readiness line within {HANG_GUARD_S} s:\n{served.output}"
        assert served.process.poll() is None, f"lm-assets serve exited with {served.process.returncode}:\n{served.output}"
        # The command it ran is printed first: transformers serve, continuous batching, on this export.
        command = served.lines[0].split()
        assert command[1:3] == ["serve", "--host"] and "--continuous-batching" in command, served.lines[0]
        assert command[-1] == str(hf.resolve())
        url = f"http://127.0.0.1:{bound_port(served.output)}"
        with urllib.request.urlopen(url + "/health", timeout=30) as response:
            assert response.status == 200

        answers = served_answers(url, hf, PROMPTS, NEW_TOKENS, chat=True, at_once=4)
        assert answers == our_answers(load_model(hf), PROMPTS, NEW_TOKENS)
        assert any(answers), "every answer empty: the comparison would show nothing"

        # Ctrl-C, as a terminal sends it (to the foreground process group): the server stops on it, the
        # command exits as one interrupted, and nothing it started is left, in any process group.
        tree = {served.process.pid} | descendants(served.process.pid)
        groups = {os.getpgid(pid) for pid in tree}
        assert len(tree) > 1, "the server runs under the command's process_tree"
        os.killpg(served.process.pid, signal.SIGINT)
        assert served.process.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGINT, served.output
        served.reader.join(timeout=HANG_GUARD_S)
        assert "Finished server process" in served.output  # a graceful shutdown, not the grace period's SIGKILL
        assert not [pid for pid in tree if alive(pid)]
        for group in groups:
            with pytest.raises(ProcessLookupError):
                os.killpg(group, 0)
    finally:
        if served.process.poll() is None:  # a check failed before the stop
            stop_tree(served.process.pid, grace_s=1)
            served.process.wait()


def test_a_checkpoint_without_an_export_or_a_malformed_key_is_refused_clearly(storage):
    _, env = storage
    missing = subprocess.run(lm_assets("serve", "--checkpoint", "nosuch-step_00000001"), check=False,
                             capture_output=True, text=True, env=env, timeout=HANG_GUARD_S)  # fmt: skip
    assert missing.returncode == 1
    assert "no export of nosuch-step_00000001" in missing.stderr and "materialize its checkpoint" in missing.stderr
    assert f"Checkpoints exported in {env['LM_ASSETS_STORAGE_ROOT']}: {CHECKPOINT}" in missing.stderr
    malformed = subprocess.run(lm_assets("serve", "--checkpoint", "latest"), check=False, capture_output=True, text=True,
                               env=env, timeout=HANG_GUARD_S)  # fmt: skip
    assert malformed.returncode == 2
    assert "checkpoint key 'latest' is refused" in malformed.stderr
    for refused in (missing, malformed):
        assert "Traceback" not in refused.stderr and refused.stdout == ""


def test_the_bound_port_is_read_from_the_readiness_line_only():
    assert bound_port("INFO:     Started server process [18979]\nINFO:     Waiting for application startup.\n") is None
    assert bound_port("INFO:     Uvicorn running on http://127.0.0.1:37535 (Press CTRL+C to quit)\n") == 37535
