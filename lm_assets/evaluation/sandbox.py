"""Running untrusted programs (a model's generated code) one process each, contained.

    outcome = run_program(source, Limits(timeout_s=10))
    outcome.status                 # "passed", "failed", "timeout" or "killed"

Each program gets a fresh temporary folder (removed afterwards), a scrubbed environment (`PATH`,
`LANG`, `HOME` and `TMPDIR` pointing at the folder, nothing of ours), an interpreter in isolated mode
without site-packages (`python -I -S`), a session of its own, and the runner in
`sandbox_runner.py`: network, mount and PID namespaces where the kernel allows them, with a root of
its own and, as root, the user nobody; resource limits (`Limits`); a seccomp filter against new
processes and signals to others; and an audit hook that refuses processes, sockets, ctypes and files
outside the folder. The verdict counts only with the run's token, which the runner's audit hook holds.
The wall-clock timeout kills the whole process group. What the program prints is discarded; its
error output is kept in the folder, within the file-size limit, and only its last line is reported.

A program passes only when the runner reports that it ran to its end without an exception: exiting
early, being killed, or running out of time is a failure. docs/security.md has the security model.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RUNNER = Path(__file__).with_name("sandbox_runner.py")
STATUSES = ("passed", "failed", "timeout", "killed")


@dataclass(frozen=True)
class Limits:
    """What one program may use: wall-clock and CPU seconds, address space, the size of a file it
    writes, its processes (where the kernel applies the limit); whether to ask for namespaces and to
    install the audit hook."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    processes: int = 1
    isolate: bool = True
    audit_guard: bool = True  # off only to test the layers beneath it

    def __post_init__(self):
        if self.timeout_s <= 0 or self.cpu_s < 1 or self.memory_mb < 64 or self.file_mb < 1 or self.processes < 1:
            raise ValueError(f"sandbox limits out of range: {self}")


@dataclass(frozen=True)
class Outcome:
    status: str  # passed | failed | timeout | killed
    error: str  # the exception, the signal or the timeout; empty when passed
    isolation: str  # what the runner could set up (sandbox_runner.isolate)
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def scrubbed_environment(folder: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": folder, "TMPDIR": folder, "PYTHONHASHSEED": "0"}


def run_program(source: str, limits: Limits = Limits()) -> Outcome:
    """Run `source` in the sandbox and say how it ended."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lm-assets-sandbox-") as folder:
        read_end, write_end = os.pipe()
        errors = open(Path(folder) / ".stderr", "wb")  # noqa: SIM115 - closed below, after the process
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(RUNNER), str(write_end)], cwd=folder, env=scrubbed_environment(folder),
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errors, pass_fds=(write_end,),
                start_new_session=True,
            )  # fmt: skip
        finally:
            os.close(write_end)
            errors.close()
        settings = {k: v for k, v in asdict(limits).items() if k != "timeout_s"}
        # Only the runner's verdict carries this run's token; a line the program writes to the channel does not.
        token = secrets.token_hex(16)
        timed_out = False
        try:
            proc.communicate((json.dumps(settings) + "\n" + token + "\n" + source).encode(), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the program and anything it left behind
            proc.wait()
        with os.fdopen(read_end, "rb") as f:
            lines = f.read(1 << 16).decode("utf-8", "replace").splitlines()
        report: dict = {}
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError, TypeError):
                message = json.loads(line) if line.startswith("{") else {}
                if "isolation" in message and "isolation" not in report:  # written before the program ran
                    report["isolation"] = str(message["isolation"])
                elif message.get("token") == token:
                    report |= {"status": message.get("status"), "error": message.get("error", "")}
        stderr = (Path(folder) / ".stderr").read_bytes()[-4096:].decode("utf-8", "replace").strip().splitlines()
    seconds = time.perf_counter() - started
    isolation = report.get("isolation", "unknown: the runner reported nothing")
    if timed_out:
        return Outcome("timeout", f"ran past {limits.timeout_s:g} s", isolation, seconds)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = {"SIGXCPU": f"CPU time over {limits.cpu_s} s", "SIGXFSZ": f"a file over {limits.file_mb} MB"}.get(name, name)
        return Outcome("killed", why, isolation, seconds)
    if report.get("status") in ("passed", "failed"):
        return Outcome(report["status"], report.get("error", ""), isolation, seconds)
    return Outcome("failed", f"exited with {proc.returncode} before the end" + (f": {stderr[-1]}" if stderr else ""),
                   isolation, seconds)  # fmt: skip


__all__ = ["Limits", "Outcome", "STATUSES", "run_program", "scrubbed_environment"]
