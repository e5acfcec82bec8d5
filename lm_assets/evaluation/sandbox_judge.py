"""Judges a sandboxed program by its tests, in a process that never runs the program's code; standard
library only.

Started as `python -I -S sandbox_judge.py CALLS_FD ANSWERS_FD VERDICT_FD`, its stdin a JSON object:
`prelude` (code of the problem's own, such as the helpers its tests use), `tests`, `entry_point` and
`call` (the statement that runs the tests, such as `check(candidate)`), and `settings` (the limits).
The program runs in the sandbox (`sandbox_runner.py`), which says on ANSWERS_FD whether it loaded and
then answers calls. Here the prelude and the tests run with `entry_point` bound to a stand-in that
sends each call's arguments to the program and decodes what comes back as plain values
(`plain_values`): the tests compare values built here, of Python's own types, never an object of the
program's. The verdict, `{"status": "passed" | "failed", "error": ...}`, goes to VERDICT_FD, which only
this process holds. Without tests (`tests` null), the verdict is whether the program loaded, by its own
account: that is for running a program, not for scoring one.
"""

import json
import os
import resource
import sys

ANSWER_BYTES = 64 << 20  # the longest answer read; a program that writes more fails


class ProgramFailed(Exception):
    """The program raised, broke off, or answered with something that is not plain data."""


def load_plain_values():
    import importlib.util

    spec = importlib.util.spec_from_file_location("plain_values", os.path.join(os.path.dirname(__file__), "plain_values.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plain_values = load_plain_values()


class Program:
    """The sandboxed program, as far as the tests can see it: what it answers."""

    def __init__(self, calls_fd: int, answers_fd: int):
        self.calls = os.fdopen(calls_fd, "wb")
        self.answers = os.fdopen(answers_fd, "rb")

    def receive(self) -> dict:
        line = self.answers.readline(ANSWER_BYTES + 1)
        if not line.endswith(b"\n"):
            raise ProgramFailed("the program ended before it answered" if len(line) <= ANSWER_BYTES
                                else f"the program answered with more than {ANSWER_BYTES >> 20} MiB")  # fmt: skip
        try:
            message = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ProgramFailed(f"the program's answer is not JSON ({type(exc).__name__})") from None
        if type(message) is not dict:
            raise ProgramFailed("the program's answer is not a message")
        return message

    def call(self, function: str, args: tuple):
        try:
            self.calls.write((json.dumps({"function": function, "args": [plain_values.encode(a) for a in args]}) + "\n").encode())
            self.calls.flush()
        except BrokenPipeError:
            raise ProgramFailed("the program ended before it answered") from None
        answer = self.receive()
        if "raised" in answer:
            raise ProgramFailed(str(answer["raised"])[:600])
        if set(answer) != {"value"}:
            raise ProgramFailed("the program's answer is neither a value nor an exception")
        try:
            return plain_values.decode(answer["value"])
        except (plain_values.NotPlain, RecursionError) as exc:
            raise ProgramFailed(f"the program answered with something that is not plain data: {exc}") from None

    def stand_in(self, function: str):
        def called(*args, **kwargs):
            if kwargs:
                raise TypeError(f"{function}: the tests call it with keyword arguments, which are not passed on")
            return self.call(function, args)

        called.__name__ = called.__qualname__ = function
        return called


def verdict(spec: dict, program: Program) -> tuple[str, str]:
    loaded = program.receive()
    if loaded.get("loaded") is not True:
        return "failed", str(loaded.get("error", "the program did not say how it loaded"))[:600]
    if spec.get("tests") is None:
        return "passed", ""
    namespace = {"__name__": "__judge__"}
    entry_point = spec["entry_point"]
    exec(compile(spec.get("prelude") or "", "<prelude>", "exec"), namespace)
    exec(compile(spec["tests"], "<tests>", "exec"), namespace)
    namespace[entry_point] = program.stand_in(entry_point)
    exec(compile(spec["call"], "<call>", "exec"), namespace)
    return "passed", ""


def main() -> None:
    calls, answers, verdict_fd = (int(fd) for fd in sys.argv[1:4])
    spec = json.loads(sys.stdin.read())
    settings = spec["settings"]
    mib = 1 << 20
    resource.setrlimit(resource.RLIMIT_CPU, (settings["cpu_s"], settings["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, ((settings["memory_mb"] + 256) * mib,) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.set_int_max_str_digits(0)  # an answer may be a long int, as in the program's own process
    try:
        status, error = verdict(spec, Program(calls, answers))
    except ProgramFailed as exc:
        status, error = "failed", str(exc)
    except BaseException as exc:  # noqa: BLE001 - a failing test is the verdict
        status, error = "failed", f"{type(exc).__name__}: {str(exc)[:500]}"
    with os.fdopen(verdict_fd, "w") as out:
        out.write(json.dumps({"status": status, "error": error}) + "\n")
    os._exit(0)


if __name__ == "__main__":
    main()
