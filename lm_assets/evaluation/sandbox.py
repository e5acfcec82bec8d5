"""Running untrusted programs (a model's generated code) one process each, contained, and judging them
from another process.

    outcome = run_judged(prompt + completion, tests=test, entry_point="add", call="check(add)",
                         prelude=prompt, limits=Limits(timeout_s=10))
    outcome.status                 # "passed", "failed", "timeout" or "killed"

Two processes per program. The program runs in the sandbox (`sandbox_runner.py`): a fresh temporary
folder, a scrubbed environment (`PATH`, `LANG`, `HOME` and `TMPDIR` pointing at the folder, nothing of
ours), an interpreter in isolated mode without site-packages (`python -I -S`), a session of its own;
network, mount and PID namespaces where the kernel allows them, with a root of its own and, as root, a
user of its own; resource limits (`Limits`); a seccomp filter against new processes, signals to others
and memory outside the limits; and an audit hook that refuses processes, sockets, ctypes and files
outside the folder. The tests run in the judge (`sandbox_judge.py`), which never runs the program's
code: it calls the program's function through a pipe, with arguments and results as plain values
(`plain_values`), and alone writes the verdict, on a pipe the program never holds. The wall-clock
timeout kills both process groups. What the program prints is discarded; its error output goes to an
unnamed file that this process opened, within the file-size limit, and only its last line is reported.

A program passes only when its tests run to their end in the judge. docs/security.md has the security
model.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RUNNER = Path(__file__).with_name("sandbox_runner.py")
JUDGE = Path(__file__).with_name("sandbox_judge.py")
STATUSES = ("passed", "failed", "timeout", "killed")


@dataclass(frozen=True)
class Limits:
    """What one program may use: wall-clock and CPU seconds, address space, the size of a file it
    writes and of all its files together (in its own root), its threads (as a user of its own) and
    processes (where the kernel applies the limit); whether to ask for namespaces and to install the
    audit hook."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    disk_mb: int = 64
    threads: int = 16
    processes: int = 1
    isolate: bool = True
    audit_guard: bool = True  # off only to test the layers beneath it

    def __post_init__(self):
        if (self.timeout_s <= 0 or self.cpu_s < 1 or self.memory_mb < 64 or self.file_mb < 1
                or self.disk_mb < self.file_mb or self.threads < 0 or self.processes < 1):
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
    """Run `source` in the sandbox and say how it ended: `passed` when it ran to its end, by its own
    account. For running a program; a score comes from `run_judged`."""
    return run_judged(source, tests=None, limits=limits)


def run_judged(source: str, tests: str | None, entry_point: str = "", call: str = "", prelude: str = "",
               limits: Limits = Limits()) -> Outcome:  # fmt: skip
    """Run `source` in the sandbox, and `prelude` then `tests` then `call` in the judge with `entry_point`
    standing for the program's function of that name; say how it ended."""
    started = time.perf_counter()
    settings = {k: v for k, v in asdict(limits).items() if k != "timeout_s"}
    spec = {"prelude": prelude, "tests": tests, "entry_point": entry_point, "call": call, "settings": settings}
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="lm-assets-sandbox-"))
        # Read only through descriptors opened here: a path in the program's folder may be a FIFO or a link.
        errors = stack.enter_context(tempfile.TemporaryFile(prefix="lm-assets-sandbox-stderr-"))
        report_read, report_write = os.pipe()
        calls_read, calls_write = os.pipe()
        answers_read, answers_write = os.pipe()
        verdict_read, verdict_write = os.pipe()
        try:
            program = subprocess.Popen(
                [sys.executable, "-I", "-S", str(RUNNER), str(report_write), str(calls_read), str(answers_write)],
                cwd=folder, env=scrubbed_environment(folder), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=errors, pass_fds=(report_write, calls_read, answers_write), start_new_session=True,
            )  # fmt: skip
            judge = subprocess.Popen(
                [sys.executable, "-I", "-S", str(JUDGE), str(calls_write), str(answers_read), str(verdict_write)],
                cwd=folder, env=scrubbed_environment(folder), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, pass_fds=(calls_write, answers_read, verdict_write), start_new_session=True,
            )  # fmt: skip
        finally:
            for fd in (report_write, calls_read, answers_write, calls_write, answers_read, verdict_write):
                os.close(fd)
        deadline = started + limits.timeout_s
        timed_out = not feed(program, (json.dumps(settings) + "\n" + source).encode(), deadline)
        timed_out = timed_out or not feed(judge, json.dumps(spec).encode(), deadline)
        if not timed_out:
            try:
                judge.wait(timeout=max(0.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if not timed_out:  # a program that broke off is ending: wait for how (a signal of its limits)
            with contextlib.suppress(subprocess.TimeoutExpired):
                program.wait(timeout=max(0.0, min(1.0, deadline - time.perf_counter())))
        ended = program.poll()
        for proc in (program, judge):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the process and anything it left behind
            proc.wait()
        isolation = str(read_message(report_read).get("isolation", "unknown: the runner reported nothing"))
        verdict = read_message(verdict_read)
        stderr = os.pread(errors.fileno(), 4096, max(0, os.fstat(errors.fileno()).st_size - 4096))
    stderr_lines = stderr.decode("utf-8", "replace").strip().splitlines()
    seconds = time.perf_counter() - started
    if verdict.get("status") == "passed" and not timed_out:
        return Outcome("passed", "", isolation, seconds)
    if timed_out:
        return Outcome("timeout", f"ran past {limits.timeout_s:g} s", isolation, seconds)
    if ended is not None and ended < 0:
        name = signal.Signals(-ended).name
        why = {"SIGXCPU": f"CPU time over {limits.cpu_s} s", "SIGXFSZ": f"a file over {limits.file_mb} MB"}.get(name, name)
        return Outcome("killed", why, isolation, seconds)
    error = str(verdict.get("error") or f"the judge ended with {judge.returncode} and gave no verdict")
    if error == "the program ended before it answered":
        error = f"exited with {ended} before the end" + (f": {stderr_lines[-1]}" if stderr_lines else "")
    return Outcome("failed", error, isolation, seconds)


def feed(proc: subprocess.Popen, data: bytes, deadline: float) -> bool:
    """Write `data` to the process's stdin and close it; False when the deadline passed first."""
    try:
        proc.stdin.write(data)
    except BrokenPipeError:
        pass  # it ended early; how is read from its exit
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    return time.perf_counter() < deadline


def read_message(fd: int) -> dict:
    """The first JSON line on a pipe whose writers have all ended; {} when there is none."""
    with os.fdopen(fd, "rb") as f:
        line = f.readline(1 << 16)
    with contextlib.suppress(ValueError, RecursionError):
        message = json.loads(line)
        return message if isinstance(message, dict) else {}
    return {}


__all__ = ["STATUSES", "Limits", "Outcome", "run_judged", "run_program", "scrubbed_environment"]
