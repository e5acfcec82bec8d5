"""What `make ui` starts stops: lm_assets.app.process_tree runs a command and, told to stop, stops every
process the command started, those in sessions of their own, those that ignore SIGTERM and those whose parent
already exited included."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from lm_assets.app.process_tree import alive, cmdline, descendants, stop_tree

ROOT = Path(__file__).resolve().parents[2]

# A parent that starts: a child in a session of its own that ignores SIGTERM, and a middle process that
# starts a grandchild and exits at once, leaving it without a parent (as a webserver can leave its code
# server). Each writes its pid to the folder given.
STUBBORN_TREE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    ignore = "import signal, time, os, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \\
             "open(os.path.join(sys.argv[1], str(os.getpid())), 'w').close(); time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", ignore, out], start_new_session=True)
    middle = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]])"
    subprocess.run([sys.executable, "-c", middle, ignore, out])
    open(os.path.join(out, str(os.getpid())), "w").close()
    time.sleep(600)
""")


# Every wait below ends on an event (a file appears, a process exits); this bound only keeps a hang from
# lasting for ever, so a loaded machine cannot fail a test that a quiet one passes.
HANG_GUARD_S = 300


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def wait_for(condition, what: str) -> None:
    assert wait_until(condition, HANG_GUARD_S), f"{what}: not within {HANG_GUARD_S} s"


def test_a_stop_ends_every_process_the_command_started(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "lm_assets.app.process_tree", "--grace-s", "2", "--",
         sys.executable, "-c", STUBBORN_TREE, str(pids)],
        cwd=ROOT, start_new_session=True,
    )
    try:
        wait_for(lambda: len(list(pids.iterdir())) == 3, "the tree started")
        started = {int(p.name) for p in pids.iterdir()}
        # The orphaned grandchild is still under the wrapper, which is its subreaper.
        assert started <= descendants(wrapper.pid)
        os.killpg(wrapper.pid, signal.SIGTERM)  # as a terminal or a supervisor stops `make ui`'s group
        assert wrapper.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGTERM
        assert not [pid for pid in started if alive(pid)]
    finally:
        if wrapper.poll() is None:  # a check failed before the stop
            stop_tree(wrapper.pid, grace_s=1)
            wrapper.wait()


def test_stop_tree_returns_once_what_it_killed_is_gone(tmp_path):
    """A process that ignores SIGTERM, holding 256 MiB: SIGKILL takes a moment to free it, and stop_tree
    waits for that rather than leaving it to whoever checks next."""
    holding = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); memory = bytearray(256 << 20); "
               "memory[::4096] = b'x' * (len(memory) // 4096); print('ready', flush=True); time.sleep(3600)")  # fmt: skip
    child = subprocess.Popen([sys.executable, "-c", holding], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout.readline() == b"ready\n"
        assert stop_tree(child.pid, grace_s=0.2) == {child.pid}
        assert not alive(child.pid)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


# process_tree's `main`, with a stop arriving just as the command has started: the pid of the command's process
# goes to the file given, then SIGTERM to process_tree itself.
STOPPED_AS_IT_STARTS = textwrap.dedent("""
    import os, signal, subprocess, sys
    from lm_assets.app import process_tree
    started = subprocess.Popen

    def popen(*args, **kwargs):
        child = started(*args, **kwargs)
        with open(sys.argv[1], "w") as out:
            out.write(str(child.pid))
        os.kill(os.getpid(), signal.SIGTERM)
        return child

    process_tree.subprocess.Popen = popen
    sys.exit(process_tree.main(["--grace-s", "5", "--", sys.executable, "-c", "import time; time.sleep(3600)"]))
""")


def test_a_stop_as_the_command_starts_is_not_lost(tmp_path):
    pid_file = tmp_path / "pid"
    wrapper = subprocess.Popen([sys.executable, "-c", STOPPED_AS_IT_STARTS, str(pid_file)], cwd=ROOT)
    try:
        assert wrapper.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGTERM
        assert not alive(int(pid_file.read_text()))  # the command, in a session of its own, was stopped too
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait()
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dagster_dev_stops_whole_with_its_webserver_daemon_and_code_server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy/dagster.yaml").read_text())
    port = free_port()
    dagster = Path(sys.executable).parent / "dagster"
    # The handlers a backgrounded shell leaves: SIGINT and SIGTERM ignored, which dagster dev inherits.
    ignoring = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); " \
               "signal.signal(signal.SIGTERM, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])"
    wrapper = subprocess.Popen(
        [sys.executable, "-c", ignoring, sys.executable, "-m", "lm_assets.app.process_tree", "--grace-s", "10", "--",
         str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "DAGSTER_HOME": str(home)},
    )
    try:
        def serving() -> bool:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).status == 200
            except OSError:
                return False

        wait_for(serving, "dagster dev serving")
        wait_for(lambda: any("api grpc" in cmdline(pid) for pid in descendants(wrapper.pid)), "a code server")
        started = descendants(wrapper.pid)
        commands = " | ".join(cmdline(pid) for pid in started)
        # dagster dev, the webserver, the daemon and a code server
        assert all(name in commands for name in ("dagster dev", "dagster_webserver", "dagster._daemon", "api grpc"))
    finally:
        os.killpg(wrapper.pid, signal.SIGTERM)
        try:
            returncode = wrapper.wait(timeout=HANG_GUARD_S)
        finally:
            if wrapper.poll() is None:  # it did not stop
                stop_tree(wrapper.pid, grace_s=1)
                wrapper.wait()
    assert returncode == 128 + signal.SIGTERM
    assert wait_until(lambda: not [pid for pid in started if alive(pid)], HANG_GUARD_S), [
        cmdline(p) for p in started if alive(p)
    ]



def postgres_home_stand_in(hold: str = "") -> str:
    """`lm-assets` for `make ui-postgres`: `postgres-home HOME` starts the server (touching HOME/starting
    first), `postgres-home HOME --stop` stops it (touching HOME/stopping, then HOME/stopped), and when `hold`
    is `starting` or `stopping` it waits there until HOME/go exists; check-instance passes."""
    return textwrap.dedent(f"""\
        #!/bin/sh
        [ "$1" = postgres-home ] || exit 0
        step=starting; [ "$3" = --stop ] && step=stopping
        touch "$2/$step"
        [ "$step" = "{hold}" ] && while [ ! -e "$2/go" ]; do sleep 0.05; done
        if [ "$step" = stopping ]; then touch "$2/stopped"; else echo "export PGPORT=1"; fi
    """)


def ui_postgres(tmp_path, lm_assets: str, inherited=signal.SIG_DFL) -> tuple[subprocess.Popen, Path]:
    """`make ui-postgres` with stand-ins for the virtualenv's commands: `lm-assets` as given, `python` the real
    one, so that `lm_assets.app.process_tree` runs the UI as it does in use, and `dagster` the UI, writing its
    pid to POSTGRES_HOME/serving and waiting to be stopped. Make starts in a session of its own with SIGINT and
    SIGTERM set to `inherited` (a backgrounded shell leaves them ignored), whatever this process has."""
    bin_dir, home = tmp_path / "bin", tmp_path / "postgres_home"
    bin_dir.mkdir()
    home.mkdir()
    (bin_dir / "lm-assets").write_text(lm_assets)
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bin_dir / "dagster").write_text('#!/bin/sh\necho $$ > "$POSTGRES_HOME/pid" && mv "$POSTGRES_HOME/pid" '
                                     '"$POSTGRES_HOME/serving"\nexec sleep 3600\n')  # fmt: skip
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)

    make = ["make", "-s", "-o", ".venv/.installed", "-o", ".venv/.dev-installed", f"BIN={bin_dir}", "ui-postgres"]
    with_signals = ("import os, signal as s, sys; [s.signal(n, s.SIG_DFL) for n in (s.SIGHUP, s.SIGPIPE, s.SIGXFSZ)]; "
                    f"[s.signal(n, {int(inherited)}) for n in (s.SIGINT, s.SIGTERM)]; "
                    "s.pthread_sigmask(s.SIG_UNBLOCK, {s.SIGHUP, s.SIGINT, s.SIGTERM}); os.execvp(sys.argv[1], sys.argv[1:])")  # fmt: skip
    started = subprocess.Popen([sys.executable, "-c", with_signals, *make], cwd=ROOT, start_new_session=True,
                               env={**os.environ, "POSTGRES_HOME": str(home)}, stdout=subprocess.DEVNULL)  # fmt: skip
    return started, home


def wait_while_running(make: subprocess.Popen, path: Path, what: str) -> None:
    """Until `path` exists; a make that exits first fails the test at once."""
    wait_for(lambda: path.exists() or make.poll() is not None, what)
    assert path.exists(), f"{what}: make exited with {make.returncode} first"


def make_exits(make: subprocess.Popen) -> int:
    try:
        return make.wait(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(["ps", "-o", "pid,ppid,pgid,stat,args", "-s", str(make.pid)], capture_output=True,
                              text=True, check=False).stdout  # fmt: skip
        raise AssertionError(f"make did not exit within {HANG_GUARD_S} s of the stop:\n{tree}") from None


@contextlib.contextmanager
def stopped_at_the_end(make: subprocess.Popen, home: Path):
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait()
        if (home / "serving").exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int((home / "serving").read_text()), signal.SIGKILL)


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_a_stopped_ui_postgres_stops_its_ui_and_then_its_postgres_server(tmp_path, inherited):
    make, home = ui_postgres(tmp_path, postgres_home_stand_in(), inherited)
    with stopped_at_the_end(make, home):
        wait_while_running(make, home / "serving", "the UI started")
        ui = int((home / "serving").read_text())
        os.killpg(make.pid, signal.SIGTERM)  # as a terminal or a supervisor stops `make ui-postgres`
        assert make_exits(make) != 0
        assert (home / "stopped").exists()  # stopped before make exited
        assert not alive(ui)


def test_a_second_stop_does_not_cut_the_postgres_server_stop_short(tmp_path):
    """Ctrl-C twice: the second reaches the stop of the server too, which finishes all the same."""
    make, home = ui_postgres(tmp_path, postgres_home_stand_in(hold="stopping"))
    with stopped_at_the_end(make, home):
        wait_while_running(make, home / "serving", "the UI started")
        os.killpg(make.pid, signal.SIGTERM)
        wait_while_running(make, home / "stopping", "the server's stop began")
        os.killpg(make.pid, signal.SIGTERM)
        (home / "go").touch()
        make_exits(make)
        assert (home / "stopped").exists()


def test_a_stop_while_the_postgres_server_starts_stops_it(tmp_path):
    make, home = ui_postgres(tmp_path, postgres_home_stand_in(hold="starting"))
    with stopped_at_the_end(make, home):
        wait_while_running(make, home / "starting", "the server's start began")
        os.killpg(make.pid, signal.SIGTERM)
        assert make_exits(make) != 0
        assert (home / "stopped").exists()
        assert not (home / "serving").exists()


def test_ui_postgres_refuses_to_start_without_its_postgres_server(tmp_path):
    # The server does not start: make fails with its message; the server starts but the instance is not on
    # PostgreSQL: check-instance refuses. Either way no UI starts on the SQLite instance of DAGSTER_HOME.
    for stub, refusal in (('[ "$1" = postgres-home ] && [ "$3" != --stop ] && { echo "no server: port taken" >&2; exit 1; }\n'
                           'exit 0\n', "no server: port taken"),
                          ('[ "$1" = check-instance ] && { echo "not on PostgreSQL" >&2; exit 2; }\n'
                           '[ "$1" = postgres-home ] && [ "$3" != --stop ] && echo "export PGPORT=1"\nexit 0\n',
                           "not on PostgreSQL")):  # fmt: skip
        bin_dir, home = tmp_path / f"bin{len(refusal)}", tmp_path / f"home{len(refusal)}"
        bin_dir.mkdir()
        home.mkdir()
        (bin_dir / "lm-assets").write_text("#!/bin/sh\n" + stub)
        (bin_dir / "python").write_text('#!/bin/sh\ntouch "$POSTGRES_HOME/serving"\nexec sleep 600\n')
        for command in bin_dir.iterdir():
            command.chmod(0o755)
        made = subprocess.run(["make", "-s", "-o", ".venv/.installed", "-o", ".venv/.dev-installed", f"BIN={bin_dir}", "ui-postgres"], cwd=ROOT,
                              env={**os.environ, "POSTGRES_HOME": str(home)}, capture_output=True, text=True, timeout=60)
        assert made.returncode != 0 and refusal in made.stderr
        assert not (home / "serving").exists()
