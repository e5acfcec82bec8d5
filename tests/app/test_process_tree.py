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


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_a_stop_ends_every_process_the_command_started(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "lm_assets.app.process_tree", "--grace-s", "2", "--",
         sys.executable, "-c", STUBBORN_TREE, str(pids)],
        cwd=ROOT, start_new_session=True,
    )
    try:
        assert wait_until(lambda: len(list(pids.iterdir())) == 3, 30)
        started = {int(p.name) for p in pids.iterdir()}
        # The orphaned grandchild is still under the wrapper, which is its subreaper.
        assert started <= descendants(wrapper.pid)
        os.killpg(wrapper.pid, signal.SIGTERM)  # as a terminal or a supervisor stops `make ui`'s group
        assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
        assert not [pid for pid in started if alive(pid)]
    finally:
        if wrapper.poll() is None:  # a check failed before the stop
            stop_tree(wrapper.pid, grace_s=1)
            wrapper.wait()


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

        assert wait_until(serving, 180), "dagster dev did not serve"
        assert wait_until(lambda: any("api grpc" in cmdline(pid) for pid in descendants(wrapper.pid)), 120)
        started = descendants(wrapper.pid)
        commands = " | ".join(cmdline(pid) for pid in started)
        # dagster dev, the webserver, the daemon and a code server
        assert all(name in commands for name in ("dagster dev", "dagster_webserver", "dagster._daemon", "api grpc"))
    finally:
        os.killpg(wrapper.pid, signal.SIGTERM)
        try:
            returncode = wrapper.wait(timeout=60)
        finally:
            if wrapper.poll() is None:  # it did not stop
                stop_tree(wrapper.pid, grace_s=1)
                wrapper.wait()
    assert returncode == 128 + signal.SIGTERM
    assert wait_until(lambda: not [pid for pid in started if alive(pid)], 5), [cmdline(p) for p in started if alive(p)]



def test_a_stopped_ui_postgres_stops_its_postgres_server(tmp_path):
    # `make ui-postgres` with stand-ins for the virtualenv's commands: lm-assets starts and stops the server
    # (writing `stopped`), python is the UI (writing `serving`, then waiting to be stopped).
    bin_dir, home = tmp_path / "bin", tmp_path / "postgres_home"
    bin_dir.mkdir()
    home.mkdir()
    (bin_dir / "lm-assets").write_text('#!/bin/sh\n[ "$3" = --stop ] && touch "$2/stopped" || echo "export PGPORT=1"\n')
    (bin_dir / "python").write_text('#!/bin/sh\ntouch "$POSTGRES_HOME/serving"\nexec sleep 600\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    make = subprocess.Popen(["make", "-s", "-o", ".venv/.installed", f"BIN={bin_dir}", "ui-postgres"], cwd=ROOT,
                            env={**os.environ, "POSTGRES_HOME": str(home)}, start_new_session=True)
    try:
        assert wait_until((home / "serving").exists, 30)
        os.killpg(make.pid, signal.SIGTERM)
        make.wait(timeout=30)
        assert wait_until((home / "stopped").exists, 30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait()


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
        made = subprocess.run(["make", "-s", "-o", ".venv/.installed", f"BIN={bin_dir}", "ui-postgres"], cwd=ROOT,
                              env={**os.environ, "POSTGRES_HOME": str(home)}, capture_output=True, text=True, timeout=60)
        assert made.returncode != 0 and refusal in made.stderr
        assert not (home / "serving").exists()
