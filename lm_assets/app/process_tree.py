"""Run a command so that everything it starts stops with it: `python -m lm_assets.app.process_tree -- CMD ...`.

`dagster dev` starts a webserver, a daemon and code servers; stopped from a script, or with its parent's
signal handlers set to ignore SIGINT and SIGTERM (as a backgrounded shell leaves them), it can leave them
running. Here the command runs with the default handlers in a session of its own; a SIGTERM, SIGINT or
SIGHUP to this process (or to the process group `make` runs it in) sends SIGTERM to every process the
command started, found by their parents in /proc, including those that started sessions of their own,
and SIGKILL to whatever is left after the grace period. This process is their subreaper, so a process
whose parent exited (a code server left by a webserver) is still found under it. Linux only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# How long the command's processes have to exit after SIGTERM before SIGKILL (`--grace-s`).
GRACE_S = 20.0
KILL_WAIT_S = 60.0
PR_SET_CHILD_SUBREAPER = 36


def parents() -> dict[int, int]:
    """Every live process's parent, read from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) is in parentheses and may hold spaces: the fields after it are fixed.
        found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def descendants(pid: int) -> set[int]:
    """The processes `pid` started, and theirs, down the tree (`pid` itself not included)."""
    children: dict[int, list[int]] = {}
    for child, parent in parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cmdline(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" once it has gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited: only its parent's wait is missing.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(root: int, grace_s: float = GRACE_S, include_root: bool = True) -> set[int]:
    """SIGTERM to `root` (if `include_root`) and every process under it, then SIGKILL to what is left after
    `grace_s`, and wait until they are gone. Processes that the tree starts meanwhile are stopped too. Returns
    the processes it signalled."""
    tree = descendants(root) | ({root} if include_root else set())
    signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        tree |= descendants(root) if alive(root) else set()
        if not any(alive(pid) for pid in tree):
            return tree
        time.sleep(0.2)
    tree |= descendants(root) if alive(root) else set()
    signal_all({pid for pid in tree if alive(pid)}, signal.SIGKILL)
    # SIGKILL takes effect at once but not instantly: return once they are gone, so that they are when this
    # process exits (a process stuck in the kernel is given up on after KILL_WAIT_S).
    deadline = time.monotonic() + KILL_WAIT_S
    while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tree


def become_subreaper() -> bool:
    """Processes under this one whose parent exits are reparented to it rather than to init (Linux's
    PR_SET_CHILD_SUBREAPER), so that they stay in its tree."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap() -> None:
    """Wait for the exited processes reparented to this one, so that none stays a zombie."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def run(command: list[str], grace_s: float = GRACE_S) -> int:
    """Run `command` until it exits or this process is told to stop; then stop everything it started."""
    become_subreaper()
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)

    # Before the command starts: a stop that arrives meanwhile is then recorded, not fatal to this process
    # alone (which would leave the command, in a session of its own, running).
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    if stopping:
        return 128 + stopping[0]
    child = subprocess.Popen(command, start_new_session=True, preexec_fn=_default_signals)
    while child.poll() is None and not stopping:
        time.sleep(0.2)
    returncode = child.returncode
    # The command's own processes may outlive it (a code server whose parent exited, now under this one).
    stop_tree(os.getpid(), grace_s, include_root=False)
    child.wait()
    reap()
    return 128 + stopping[0] if stopping else (child.returncode if returncode is None else returncode)


def _default_signals() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    grace_s = GRACE_S
    if args[:1] == ["--grace-s"] and len(args) > 1:
        grace_s, args = float(args[1]), args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m lm_assets.app.process_tree [--grace-s SECONDS] -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    return run(args, grace_s)


if __name__ == "__main__":
    sys.exit(main())
