"""The sandbox that runs generated code: hostile programs are contained and fail, nothing outside changes."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from lm_assets.evaluation.sandbox import Limits, run_program

QUICK = Limits(timeout_s=3, cpu_s=2, memory_mb=256)


def run(source: str, limits: Limits = QUICK):
    return run_program(source, limits)


def namespaces_available() -> bool:
    return run("pass").isolation.startswith("namespaces")


def test_a_correct_program_passes_and_a_wrong_one_fails_with_its_error():
    assert run("assert sum(range(10)) == 45").status == "passed"
    wrong = run("def f():\n    return 2\nassert f() == 3, 'f is wrong'")
    assert (wrong.status, wrong.error) == ("failed", "AssertionError: f is wrong")
    assert run("open('here.txt', 'w').write('x')\nassert open('here.txt').read() == 'x'").passed  # its own folder


def test_a_fork_bomb_is_refused():
    outcome = run("import os\nwhile True:\n    os.fork()")
    assert outcome.status == "failed" and "os.fork is not allowed" in outcome.error
    assert run("import subprocess\nsubprocess.run(['true'])").error == "PermissionError: sandbox: subprocess.Popen is not allowed"


def test_unbounded_allocation_fails_at_the_memory_limit():
    outcome = run("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))")
    assert (outcome.status, outcome.error) == ("failed", "MemoryError: ")


def test_writing_or_removing_outside_the_folder_changes_nothing(tmp_path):
    outside = Path("/tmp") / f"lm-assets-outside-{uuid.uuid4().hex}"
    keep = tmp_path / "keep.txt"
    keep.write_text("kept")
    for program in (f"open({str(outside)!r}, 'w').write('x')",
                    f"import os\nos.close(os.open({str(outside)!r}, os.O_CREAT | os.O_WRONLY))",
                    f"import os\nos.remove({str(keep)!r})",
                    f"import shutil\nshutil.rmtree({str(tmp_path)!r})"):  # fmt: skip
        outcome = run(program)
        assert outcome.status == "failed" and "not allowed" in outcome.error, program
    assert not outside.exists() and keep.read_text() == "kept"


def test_the_environment_holds_nothing_of_ours(monkeypatch):
    monkeypatch.setenv("LM_ASSETS_SANDBOX_SECRET", "hunter2")
    outcome = run("import os\nassert os.environ.get('LM_ASSETS_SANDBOX_SECRET') == 'hunter2', sorted(os.environ)")
    assert outcome.status == "failed"
    assert "['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'TMPDIR']" in outcome.error
    parent = run(f"print(open('/proc/{os.getpid()}/environ').read())")  # another process's environment
    assert parent.status == "failed" and "not allowed" in parent.error


def test_sleeping_or_spinning_forever_is_stopped():
    asleep = run("import time\ntime.sleep(1000)", Limits(timeout_s=1.5, cpu_s=2, memory_mb=256))
    assert (asleep.status, asleep.error) == ("timeout", "ran past 1.5 s") and asleep.seconds < 3
    spinning = run("while True:\n    pass", Limits(timeout_s=10, cpu_s=1, memory_mb=256))
    assert (spinning.status, spinning.error) == ("killed", "CPU time over 1 s")


def test_sockets_ctypes_and_leaving_early_all_fail():
    assert "socket" in run("import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)").error
    assert "ctypes.dlopen is not allowed" in run("import ctypes\nctypes.CDLL(None)").error
    early = run("import os\nos._exit(0)")  # exit status 0 before the tests ran is no pass
    assert (early.status, early.error) == ("failed", "exited with 0 before the end")
    assert run("raise SystemExit(0)").status == "failed"
    assert "File too large" in run("open('big', 'wb').write(b'x' * (32 << 20))", Limits(file_mb=8, memory_mb=512)).error


def test_without_the_audit_hook_the_namespaces_still_hold():
    if not namespaces_available():
        pytest.skip("no network and mount namespaces for the sandbox here")
    bare = Limits(timeout_s=5, cpu_s=3, memory_mb=256, audit_guard=False)
    outside = Path("/tmp") / f"lm-assets-outside-{uuid.uuid4().hex}"
    wrote = run(f"open({str(outside)!r}, 'w').write('x')", bare)
    # Its root holds only its folder, the Python installation and the system libraries, the rest read-only.
    assert wrote.status == "failed" and "Read-only file system" in wrote.error and not outside.exists()
    system = run("open('/usr/lib/lm-assets-probe', 'w').write('x')", bare)
    assert system.status == "failed" and "Read-only file system" in system.error
    network = run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)", bare)
    assert network.status == "failed" and "unreachable" in network.error.lower()
    assert run("open('here.txt', 'w').write('x')", bare).passed


def test_without_the_audit_hook_the_kernel_still_refuses_new_processes():
    bare = Limits(timeout_s=5, cpu_s=3, memory_mb=512, audit_guard=False)
    probe = run("pass", bare)
    if "processes: none (seccomp)" not in probe.isolation:
        pytest.skip(f"no seccomp filter here: {probe.isolation}")
    for program in ("import os\nos.fork()", "import subprocess\nsubprocess.run(['true'])", "import os\nos.execv('/bin/true', ['true'])"):
        outcome = run(program, bare)
        assert (outcome.status, outcome.error) == ("failed", "PermissionError: [Errno 1] Operation not permitted"), program
    threads = "import threading\nr = []\nt = threading.Thread(target=lambda: r.append(1))\nt.start()\nt.join()\nassert r == [1]"
    assert run(threads, bare).passed  # threads are not processes


BARE = Limits(timeout_s=5, cpu_s=3, memory_mb=256, audit_guard=False)


def needs_namespaces():
    if not namespaces_available():
        pytest.skip("no namespaces for the sandbox here")


def test_the_parent_reads_the_programs_errors_only_through_its_own_descriptor(tmp_path):
    # A FIFO or a link where the error output once was: nothing in the folder is opened by the parent.
    host_file = tmp_path / "host.txt"
    host_file.write_text("host secret")
    bare = Limits(timeout_s=5, cpu_s=3, memory_mb=256, isolate=False, audit_guard=False)
    for swap in ("os.mkfifo('.stderr')", f"os.symlink({str(host_file)!r}, '.stderr')"):
        outcome = run(f"import os\nos.path.lexists('.stderr') and os.remove('.stderr')\n{swap}\nraise SystemExit(3)", bare)
        assert outcome.status == "failed", outcome  # a FIFO read would have run into the timeout
        assert "host secret" not in outcome.error
    told = run("import sys\nsys.stderr.write('first\\nlast words\\n')\nsys.stderr.flush()\nimport os\nos._exit(2)")
    assert told.error == "exited with 2 before the end: last words"


def test_memory_threads_and_disk_beyond_the_limits_are_refused():
    memfd = run("import os\nos.write(os.memfd_create('x'), b'x' * (64 << 20))", BARE)
    assert memfd.status == "failed" and "Operation not permitted" in memfd.error, memfd
    needs_namespaces()
    many = ("import threading\nthreading.stack_size(65536)\nstop = threading.Event()\n"
            "for _ in range(200):\n    threading.Thread(target=stop.wait, daemon=True).start()")
    threads = run(many, Limits(timeout_s=5, cpu_s=3, memory_mb=512, threads=16, audit_guard=False))
    assert threads.status == "failed" and "can't start new thread" in threads.error, threads
    assert run(many.replace("200", "10"), Limits(timeout_s=5, cpu_s=3, memory_mb=512, threads=16)).passed
    files = "for i in range(12):\n    open(f'f{i}', 'wb').write(b'x' * (8 << 20))"
    disk = run(files, Limits(timeout_s=5, cpu_s=3, memory_mb=256, file_mb=16, disk_mb=32, audit_guard=False))
    assert disk.status == "failed" and "No space left on device" in disk.error, disk
    assert run(files.replace("12", "3"), Limits(timeout_s=5, cpu_s=3, memory_mb=256, file_mb=16, disk_mb=32)).passed


def test_a_directory_descriptor_reaches_nothing_outside():
    # The audit event of open() shows the path, not dir_fd: '..' from a descriptor on the Python
    # installation, checked against the folder, would read /etc/shadow.
    probe = ("import os, sys\nos.makedirs('a/b/c/d/e/f/g/h', exist_ok=True)\nos.chdir('a/b/c/d/e/f/g/h')\n"
             "fd = os.open(sys.base_prefix, os.O_RDONLY)\n"
             "depth = len(os.path.realpath(sys.base_prefix).strip('/').split('/'))\n"
             "print(os.read(os.open('../' * depth + 'etc/shadow', os.O_RDONLY, dir_fd=fd), 100))")
    guarded = run(probe)
    assert guarded.status == "failed" and "not allowed" in guarded.error
    assert "climbs" in run("import os\nos.open('../x', os.O_RDONLY)").error
    listing = run("import os\nos.chdir('/')\nprint(os.listdir('.'))")
    assert listing.status == "failed" and "os.chdir on '/' is not allowed" in listing.error
    needs_namespaces()
    bare = run(probe, BARE)  # the program's own root has no /etc at all
    assert bare.status == "failed" and "No such file or directory" in bare.error


def test_the_program_sees_no_other_process_and_signals_none():
    needs_namespaces()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for program in (f"import os, signal\nsignal.pidfd_send_signal(os.pidfd_open({victim.pid}), signal.SIGKILL)",
                        f"import os, signal\nos.kill({victim.pid}, signal.SIGTERM)",
                        f"import os, signal\nos.kill(0, signal.SIGTERM)",
                        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)"):  # fmt: skip
            for limits in (QUICK, BARE):
                outcome = run(program, limits)
                assert outcome.status == "failed" and outcome.error, (program, outcome)
        assert victim.poll() is None  # alive
    finally:
        victim.kill()
        victim.wait()
    # Process 2 of its own PID namespace (1 waits for it), alone with it in a fresh /proc, free to signal
    # itself and no other.
    alone = run("import os, signal\nassert (os.getpid(), os.getppid()) == (2, 1), (os.getpid(), os.getppid())\n"
                "assert sorted(p for p in os.listdir('/proc') if p.isdigit()) == ['1', '2'], os.listdir('/proc')\n"
                "os.kill(os.getpid(), 0)\ntry:\n    os.kill(1, signal.SIGTERM)\nexcept PermissionError:\n    pass\n"
                "else:\n    raise AssertionError('signalled process 1')", BARE)  # fmt: skip
    assert alone.passed, alone.error


def test_the_program_runs_unprivileged_in_a_root_of_its_own():
    needs_namespaces()
    seen = ("import os, sys\nroot = set(os.listdir('/'))\n"
            "assert not {'etc', 'home', 'var', 'work'} & root, root\n"
            "assert os.listdir('/tmp') == [os.path.basename(os.getcwd())], os.listdir('/tmp')\n"
            "assert not os.path.exists('/root/.bashrc') and not os.path.exists('/etc/passwd')\n"
            "assert os.path.isdir(os.path.realpath(sys.base_prefix))\n"
            f"assert os.getuid() != 0 or {os.geteuid()} != 0, os.getuid()\n"
            "open('mine.txt', 'w').write('x')")
    outcome = run(seen, BARE)
    assert outcome.passed, outcome.error
    assert "own PID namespace and root" in outcome.isolation
    if os.geteuid() == 0:
        assert "as a user of its own" in outcome.isolation
