"""Runs one untrusted program inside the sandbox (`lm_assets.evaluation.sandbox`); standard library only.

Started as `python -I -S sandbox_runner.py RESULT_FD` in a fresh folder, with a scrubbed environment,
in a session of its own. Its first stdin line is the settings (JSON), the rest the program. In order:

1. Isolation, where the kernel allows it (root, or unprivileged user namespaces): new network and
   mount namespaces; the network namespace has only a loopback that is down, and every mount is
   made read-only except the folder, so the program can write nowhere else. `isolation` in the
   result says whether this happened or why not.
2. Resource limits: CPU seconds, address space, file size, open files, no core files; processes
   (`RLIMIT_NPROC`) where the user is not root, for whom the kernel does not apply it; and a
   seccomp filter (x86_64, aarch64) that refuses every syscall starting a process or a program
   (fork, vfork, clone without CLONE_THREAD, clone3, execve), for root too.
3. An audit hook (PEP 578), which Python code cannot remove, refuses: new processes (fork, exec,
   spawn, system, subprocess), signals to other processes, sockets, ctypes, changing the
   environment, reading files outside the folder and the Python installation, and writing,
   removing, renaming or changing files outside the folder.
4. The program runs; the result (passed, or the exception) goes to RESULT_FD.

This contains a program's effects on the machine. It does not stop a program written to fool the
scorer by inspecting this runner's memory; see docs/security.md.
"""

import ctypes
import json
import os
import resource
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC}

REFUSED = {
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
    "os.kill", "os.killpg", "pty.spawn", "os.putenv", "os.unsetenv",
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.sendto", "socket.sendmsg", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
    "ctypes.cdata", "ctypes.addressof", "sys.setprofile", "sys.settrace", "os.chroot", "os.setuid",
}
CHANGES = {"os.remove", "os.rename", "os.rmdir", "os.chmod", "os.chown", "os.link", "os.symlink",
           "os.truncate", "os.mkdir", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}


def isolate(folder: str) -> str:
    """New network and mount namespaces with everything but `folder` read-only; what happened."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWNET | (0 if uid == 0 else CLONE_NEWUSER)
    if libc.unshare(flags) != 0:
        return f"none: unshare failed ({os.strerror(ctypes.get_errno())}); the audit hook and limits only"
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0 or mount(folder.encode(), folder.encode(), None, MS_BIND, None) != 0:
        return f"network only: the mounts could not be changed ({os.strerror(ctypes.get_errno())})"
    failed = []
    with open("/proc/self/mountinfo") as f:
        mounts = [(line.split()[4], line.split()[5]) for line in f]
    for point, options in mounts:
        if point == folder:
            continue
        kept = sum(MOUNT_FLAGS.get(o, 0) for o in options.split(","))
        if mount(None, point.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept, None) != 0:
            failed.append(point)
    os.chdir(folder)  # the working directory was entered through the mount below the bind; enter the bind
    if "/" in failed:
        return "network only: the root file system could not be made read-only"
    return "namespaces: no network, read-only outside the folder" + (f" ({len(failed)} mounts left as they were)" if failed else "")


# seccomp: no new processes, for root too (whom RLIMIT_NPROC does not bind). Per architecture: its audit
# id, the syscalls that start a process or a program, and clone, allowed only for a thread (CLONE_THREAD).
SYSCALLS = {
    "x86_64": (0xC000003E, (57, 58, 59, 322), 56),  # fork, vfork, execve, execveat; clone
    "aarch64": (0xC00000B7, (221, 281), 220),  # execve, execveat; clone
}
CLONE3 = 435  # the same number on both; answered ENOSYS, so that threads fall back to clone
CLONE_THREAD = 0x00010000


def no_new_processes() -> str:
    """A seccomp filter refusing (EPERM) every syscall that makes a process or runs a program, threads
    left alone; what happened."""
    import platform
    import struct

    machine = platform.machine()
    if machine not in SYSCALLS:
        return f"processes: RLIMIT_NPROC only (no seccomp filter for {machine})"
    arch, refused, clone = SYSCALLS[machine]
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    returns = {"allow": 0x7FFF0000, "deny": 0x00050000 | 1, "nosys": 0x00050000 | 38}  # ALLOW, ERRNO EPERM, ERRNO ENOSYS
    program = [(ld, 0, 0, 4), (jeq, 0, "allow", arch), (ld, 0, 0, 0), (jeq, "nosys", 0, CLONE3)]
    program += [(jeq, "deny", 0, nr) for nr in refused]
    program += [(jeq, 0, "allow", clone), (ld, 0, 0, 16), (jset, "allow", "deny", CLONE_THREAD)]
    at = {name: len(program) + i for i, name in enumerate(returns)}
    program += [(ret, 0, 0, value) for value in returns.values()]
    code = b""
    for i, (op, jt, jf, k) in enumerate(program):
        jt, jf = (at[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        code += struct.pack("HBBI", op, jt, jf, k)
    filters = ctypes.create_string_buffer(code)
    prog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0) != 0:  # NO_NEW_PRIVS; SECCOMP filter
        return f"processes: RLIMIT_NPROC only (seccomp refused: {os.strerror(ctypes.get_errno())})"
    return "processes: none (seccomp)"


def limit(settings: dict) -> None:
    mib = 1 << 20
    resource.setrlimit(resource.RLIMIT_CPU, (settings["cpu_s"], settings["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (settings["memory_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (settings["file_mb"] * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.geteuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (settings["processes"],) * 2)


def within(path, roots: tuple[str, ...]) -> bool:
    if isinstance(path, int):
        return True  # an open descriptor: it was checked when it was opened
    real = os.path.realpath(os.fsdecode(path))
    return any(real == root or real.startswith(root + os.sep) for root in roots)


def guard(folder: str) -> None:
    readable = (folder, *{os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}, "/dev/null",
                "/dev/urandom")  # fmt: skip
    writable = (folder, "/dev/null")

    def hook(event: str, args: tuple) -> None:
        if event in REFUSED or event.startswith("os.exec") or event.startswith("os.posix_spawn"):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = (mode and any(c in mode for c in "wax+")) or (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if path is not None and not within(path, writable if writes else readable):
                raise PermissionError(f"sandbox: opening {path!r} is not allowed")
        elif event in CHANGES:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)) and not within(path, writable):
                    raise PermissionError(f"sandbox: {event} on {path!r} is not allowed")

    sys.addaudithook(hook)


def main() -> None:
    result_fd = int(sys.argv[1])
    settings = json.loads(sys.stdin.readline())
    program = sys.stdin.read()
    folder = os.path.realpath(os.getcwd())
    isolation = isolate(folder) if settings.get("isolate", True) else "none: not asked for"
    limit(settings)
    isolation += "; " + no_new_processes()
    if settings.get("audit_guard", True):
        guard(folder)
    os.write(result_fd, (json.dumps({"isolation": isolation}) + "\n").encode())
    report = {}
    try:
        code = compile(program, "<program>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except BaseException as exc:  # noqa: BLE001 - the program's failure is the result
        report |= {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    else:
        report |= {"status": "passed"}
    os.write(result_fd, (json.dumps(report) + "\n").encode())
    os._exit(0)  # no clean-up code of the program's (atexit, finalizers) runs after the verdict


if __name__ == "__main__":
    main()
