"""Runs one untrusted program inside the sandbox (`lm_assets.evaluation.sandbox`), and answers a judge's
calls to its functions; standard library only.

Started as `python -I -S sandbox_runner.py REPORT_FD CALLS_FD ANSWERS_FD` in a fresh folder, with a
scrubbed environment, in a session of its own. Its stdin is the settings (a JSON line), then the program.
In order:

1. Isolation, where the kernel allows it (root, or unprivileged user namespaces): new network, mount and
   PID namespaces. The runner forks into them a process 1, which forks the program's process; that sees
   no process but the two (a fresh /proc). Each waits for the one below, and the runner exits as the
   program's process did. The program's process sees a root of its own (pivot_root): its folder, a
   small tmpfs (`disk_mb`), and read-only the Python installation, /usr and the libraries, /dev/null,
   /dev/zero and /dev/urandom; nothing of /etc, /tmp, /root or /home. As root it then runs as a user of
   its own (a uid no other program shares), so that the kernel counts its threads alone. The network
   namespace has only a loopback that is down. `isolation`, written to REPORT_FD (then closed), says
   what happened, or why not.
2. Resource limits: CPU seconds, address space, file size, open files, no core files, threads (as a
   user of its own); and a seccomp filter (x86_64, aarch64) that refuses every syscall starting a
   process or a program (fork, vfork, clone without CLONE_THREAD, clone3, execve), signals to any
   process but its own (kill, tgkill, tkill, pidfd_open, pidfd_send_signal), reading or writing
   another process's memory (process_vm_*, ptrace) and memory outside the address-space limit
   (memfd_create, memfd_secret), for root too.
3. An audit hook (PEP 578), which Python code cannot remove, refuses: new processes (fork, exec,
   spawn, system, subprocess), signals to other processes, sockets, ctypes, changing the
   environment, reading files outside the folder and the Python installation, writing, removing,
   renaming or changing files outside the folder, relative paths that climb (`..`, which `dir_fd`
   would resolve elsewhere than the hook), directory descriptors and listings outside those folders.
4. The program runs. The runner writes to ANSWERS_FD whether it ran to its end (`loaded`, or the
   exception), then answers each call read from CALLS_FD (a function's name and its arguments, plain
   values: `plain_values`) with the function's result or the exception it raised, until CALLS_FD
   closes.

Nothing here decides whether the program is right: the judge (`sandbox_judge.py`), a process that never
runs the program's code, calls its functions and compares what comes back. See docs/security.md.
"""

import ctypes
import json
import os
import platform
import resource
import signal
import struct
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}
# As root, the program runs as PROGRAM_UIDS + the runner's process id: a user no other program shares.
PROGRAM_UIDS = 2_000_000
# What the program's root holds besides its folder and the Python installation, read-only.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")

REFUSED = {
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
    "os.kill", "os.killpg", "pty.spawn", "os.putenv", "os.unsetenv",
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.sendto", "socket.sendmsg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
    "ctypes.cdata", "ctypes.addressof", "sys.setprofile", "sys.settrace", "os.chroot", "os.setuid",
}
CHANGES = {"os.remove", "os.rename", "os.rmdir", "os.chmod", "os.chown", "os.link", "os.symlink",
           "os.truncate", "os.mkdir", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
LISTINGS = {"os.listdir", "os.scandir", "os.chdir", "os.chroot"}


def libc():
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return lib


def unshare(uid: int, gid: int) -> str:
    """New network, mount and PID namespaces (and a user namespace when not root); "" or why not."""
    lib = libc()
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | (0 if uid == 0 else CLONE_NEWUSER)
    if lib.unshare(flags) != 0:
        return f"unshare failed ({os.strerror(ctypes.get_errno())})"
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    return ""


def check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def bind(lib, source: str, target: str, writable: bool = False) -> None:
    # The folder alone (not what is mounted below it, the new root among it); the rest with its submounts.
    flags = MS_BIND if writable else MS_BIND | MS_REC
    check(lib.mount(source.encode(), target.encode(), None, flags, None), f"bind {source}")
    if not writable:
        check(lib.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
              f"read-only {target}")


def own_root(folder: str, disk_mb: int, owner: int | None) -> None:
    """The program's root: a small tmpfs holding its folder (a tmpfs of `disk_mb`, writable, owned by
    `owner` where given), the Python installation and the system libraries (read-only), a few devices
    and a /proc of its PID namespace; the old root detached."""
    lib = libc()
    check(lib.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "private mounts")
    root = os.path.join(folder, ".root")
    os.mkdir(root)
    check(lib.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755"), "tmpfs root")
    python = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    for path in sorted({*SYSTEM_PATHS, *python}):
        inside = root + path
        if os.path.islink(path) and path in SYSTEM_PATHS:
            os.symlink(os.readlink(path), inside)  # merged /usr: /lib -> usr/lib
        elif os.path.isdir(path):
            os.makedirs(inside, exist_ok=True)
            bind(lib, path, inside)
    for device in DEVICES:
        os.makedirs(root + "/dev", exist_ok=True)
        open(root + device, "w").close()
        check(lib.mount(device.encode(), (root + device).encode(), None, MS_BIND, None), f"bind {device}")
    os.makedirs(root + folder)
    options = f"size={disk_mb}m,mode=700" + (f",uid={owner},gid={owner}" if owner is not None else "")
    check(lib.mount(b"tmpfs", (root + folder).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()), "tmpfs folder")
    os.mkdir(root + "/proc")
    check(lib.mount(b"proc", (root + "/proc").encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "proc")
    os.mkdir(root + "/.old")
    check(lib.syscall(PIVOT_ROOT[platform.machine()], root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    check(lib.umount2(b"/.old", MNT_DETACH), "detach the old root")
    os.rmdir("/.old")
    check(lib.mount(None, b"/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None), "read-only root")
    os.chdir(folder)


PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}


def drop_privileges(uid: int) -> None:
    """As root: the program (and process 1 above it) runs as `uid`, which owns its folder."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def isolate(folder: str, disk_mb: int) -> str:
    """Namespaces, the program's own root and an unprivileged user, for a process two forks down: the first
    fork is process 1 of the new PID namespace, which the kernel spares the signals it has no handler for
    (the limits' SIGXCPU and SIGXFSZ among them), so it only makes the root and waits; the second runs the
    program. Each waits for the one below and passes on how it ended. Returns what happened (the caller is
    the program's process)."""
    uid, gid = os.geteuid(), os.getegid()
    own_uid = PROGRAM_UIDS + os.getpid() if uid == 0 else None
    why = unshare(uid, gid) if PIVOT_ROOT.get(platform.machine()) else f"no pivot_root for {platform.machine()}"
    if why:
        return f"none: {why}; the audit hook and limits only"
    ended_read, ended_write = os.pipe()  # process 1 tells the runner how the program's process ended
    init = os.fork()
    if init:
        os.close(ended_write)
        follow(init, ended_read)
    os.close(ended_read)
    try:
        own_root(folder, disk_mb, own_uid)
        made = ""
    except OSError as exc:
        made = f"the program's root could not be made ({exc.strerror})"
    dropped = own_uid is not None and not made
    if dropped:
        drop_privileges(own_uid)
    program = os.fork()
    if program:
        os.write(ended_write, struct.pack("i", wait_for(program)))
        os._exit(0)
    os.close(ended_write)
    if made:
        return f"network and PID namespaces only: {made}"
    who = "a user of its own" if dropped else f"uid {uid}"
    return (f"namespaces: no network, own PID namespace and root (the folder a {disk_mb} MB tmpfs, Python read-only), "
            f"as {who}")


def wait_for(child: int) -> int:
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except InterruptedError:
            continue


def follow(init: int, ended: int) -> None:
    """Wait for process 1 of the program's namespace, then leave as the program's process did: its exit
    status, or its signal."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda s, _f, pid=init: os.kill(pid, signal.SIGKILL))
    os.close(0)
    wait_for(init)
    told = os.read(ended, 4)
    status = struct.unpack("i", told)[0] if len(told) == 4 else signal.SIGKILL  # process 1 itself was killed
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


# seccomp, per architecture: its audit id; the syscalls that start a process or a program; clone, allowed
# only for a thread (CLONE_THREAD); the signal syscalls allowed only towards this process (their first
# argument, a pid or thread group id, is its own); and those refused outright (pidfd_open,
# pidfd_send_signal, tkill, process_vm_readv, process_vm_writev, ptrace, and memfd_create and memfd_secret,
# whose memory the address-space limit does not count).
SYSCALLS = {
    "x86_64": {"arch": 0xC000003E, "processes": (57, 58, 59, 322), "clone": 56, "own": (62, 234),
               "refused": (434, 424, 200, 310, 311, 101, 319, 447)},
    "aarch64": {"arch": 0xC00000B7, "processes": (221, 281), "clone": 220, "own": (129, 131),
                "refused": (434, 424, 130, 270, 271, 117, 279, 447)},
}
CLONE3 = 435  # the same number on both; answered ENOSYS, so that threads fall back to clone
CLONE_THREAD = 0x00010000


def seccomp_program(machine: str, own_pid: int) -> list[tuple]:
    """The BPF filter as (code, jump if true, jump if false, k) with jumps to labels."""
    spec = SYSCALLS[machine]
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    program = [(ld, 0, 0, 4), (jeq, 0, "allow", spec["arch"]), (ld, 0, 0, 0), (jeq, "nosys", 0, CLONE3)]
    program += [(jeq, "deny", 0, nr) for nr in (*spec["processes"], *spec["refused"])]
    program += [(jeq, "own", 0, nr) for nr in spec["own"]]
    program += [(jeq, 0, "allow", spec["clone"]), (ld, 0, 0, 16), (jset, "allow", "deny", CLONE_THREAD)]
    # kill and tgkill: the low word of the first argument (a pid; 0 and -1 mean many processes) is ours.
    program += [("own:", 0, 0, 0), (ld, 0, 0, 16), (jeq, "allow", "deny", own_pid)]
    return program


def no_new_processes() -> str:
    """A seccomp filter refusing (EPERM) every syscall that makes a process, runs a program, signals another
    process, touches its memory or makes memory outside the limits, threads left alone; what happened."""
    machine = platform.machine()
    if machine not in SYSCALLS:
        return f"processes: RLIMIT_NPROC only (no seccomp filter for {machine})"
    returns = {"allow": 0x7FFF0000, "deny": 0x00050000 | 1, "nosys": 0x00050000 | 38}  # ALLOW, ERRNO EPERM, ENOSYS
    listed = seccomp_program(machine, os.getpid())
    labels, program = {}, []
    for item in listed:
        if item[0] == "own:":
            labels["own"] = len(program)
        else:
            program.append(item)
    labels |= {name: len(program) + i for i, name in enumerate(returns)}
    program += [(0x06, 0, 0, value) for value in returns.values()]
    code = b""
    for i, (op, jt, jf, k) in enumerate(program):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        code += struct.pack("HBBI", op, jt, jf, k)
    filters = ctypes.create_string_buffer(code)
    prog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(filters))
    lib = ctypes.CDLL(None, use_errno=True)
    if lib.prctl(38, 1, 0, 0, 0) != 0 or lib.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) != 0:  # NO_NEW_PRIVS; SECCOMP filter
        return f"processes: RLIMIT_NPROC only (seccomp refused: {os.strerror(ctypes.get_errno())})"
    return "processes: none (seccomp), signals to itself only"


def limit(settings: dict, seccomp: bool) -> None:
    """The resource limits. As a user of its own, RLIMIT_NPROC counts the program's threads alone (and
    process 1 above it); otherwise it counts every process of the user, and binds no root."""
    mib = 1 << 20
    resource.setrlimit(resource.RLIMIT_CPU, (settings["cpu_s"], settings["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (settings["memory_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (settings["file_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.geteuid() >= PROGRAM_UIDS:
        resource.setrlimit(resource.RLIMIT_NPROC, (settings["threads"] + 2,) * 2)
    elif os.geteuid() != 0 and not seccomp:
        resource.setrlimit(resource.RLIMIT_NPROC, (settings["processes"],) * 2)


def within(path, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int):
        return True  # an open descriptor: it was checked when it was opened
    real = os.path.realpath(os.fsdecode(path))
    return any(real == root or real.startswith(root + os.sep) for root in roots)


def climbs(path) -> bool:
    """A relative path that goes up (`..`): with `dir_fd`, which the audit event does not show, it would
    be resolved against another folder than the one the hook checks."""
    if isinstance(path, int) or path is None:
        return False
    text = os.fsdecode(path)
    return not os.path.isabs(text) and ".." in text.replace("\\", "/").split("/")


def guard(folder: str) -> None:
    """Install the audit hook, with its policy and helpers captured here: the program can rebind this
    module's names (it is `sys.modules['__main__']`), not what the hook holds."""
    refused, changes, listings = frozenset(REFUSED), frozenset(CHANGES), frozenset(LISTINGS)
    inside, goes_up, fsdecode, isdir = within, climbs, os.fsdecode, os.path.isdir
    path_types, o_directory = (str, bytes, os.PathLike), getattr(os, "O_DIRECTORY", 0)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT
    readable = (folder, *{os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}, "/dev/null",
                "/dev/urandom", "/dev/zero")  # fmt: skip
    writable = (folder, "/dev/null")

    def hook(event: str, args: tuple) -> None:
        if event in refused or event.startswith("os.exec") or event.startswith("os.posix_spawn"):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            if goes_up(path):
                raise PermissionError(f"sandbox: the relative path {path!r} climbs out of its folder")
            writes = (mode and any(c in mode for c in "wax+")) or (flags or 0) & write_flags
            if path is not None and not inside(path, writable if writes else readable):
                raise PermissionError(f"sandbox: opening {path!r} is not allowed")
            if path is not None and not isinstance(path, int) and not inside(path, (folder,)) and (
                    (flags or 0) & o_directory or isdir(fsdecode(path))):
                raise PermissionError(f"sandbox: a descriptor of the folder {path!r} is not allowed")  # a dir_fd
        elif event in changes:
            for path in args[:2]:
                if isinstance(path, path_types) and (goes_up(path) or not inside(path, writable)):
                    raise PermissionError(f"sandbox: {event} on {path!r} is not allowed")
        elif event in listings:
            path = args[0] if args else None
            allowed = (folder,) if event == "os.chdir" else readable
            if isinstance(path, path_types) and (goes_up(path) or not inside(path, allowed)):
                raise PermissionError(f"sandbox: {event} on {path!r} is not allowed")

    sys.addaudithook(hook)


def described(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {str(exc)[:500]}"
    except Exception:  # noqa: BLE001 - the program's own exception class may not print
        return type(exc).__name__


def send(fd: int, message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def answer_calls(namespace: dict, calls, answers: int) -> None:
    """Answer each call (`{"function": name, "args": [...]}`, plain values) with `{"value": ...}` or
    `{"raised": ...}`, until the calls' channel closes."""
    for line in calls:
        try:
            call = json.loads(line)
            args = [plain_values.decode(a) for a in call["args"]]
            answer = {"value": plain_values.encode(namespace[call["function"]](*args))}
        except BaseException as exc:  # noqa: BLE001 - the function's failure is its answer
            answer = {"raised": described(exc)}
        send(answers, answer)


def load_plain_values():
    """`plain_values.py` beside this file, read before the program's root hides it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("plain_values", os.path.join(os.path.dirname(__file__), "plain_values.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plain_values = load_plain_values()


def main() -> None:
    report, calls, answers = (int(fd) for fd in sys.argv[1:4])
    settings = json.loads(sys.stdin.readline())
    program = sys.stdin.read()
    del sys.argv[1:]
    folder = os.path.realpath(os.getcwd())
    isolation = isolate(folder, settings["disk_mb"]) if settings.get("isolate", True) else "none: not asked for"
    filtered = no_new_processes()
    limit(settings, seccomp=filtered.startswith("processes: none"))
    send(report, {"isolation": isolation + "; " + filtered})
    os.close(report)
    exit_now = os._exit  # the program may replace what its modules hold, not this
    if settings.get("audit_guard", True):
        guard(folder)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(program, "<program>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the program's failure is the result
        send(answers, {"loaded": False, "error": described(exc)})
    else:
        send(answers, {"loaded": True})
        answer_calls(namespace, os.fdopen(calls, "rb"), answers)
    exit_now(0)  # no clean-up code of the program's (atexit, finalizers) runs


if __name__ == "__main__":
    main()
