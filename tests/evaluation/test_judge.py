"""The judge: a completion's tests run in a process that never runs the completion's code, and only plain
values cross between them, so that no completion can forge its verdict."""

import math
from collections import OrderedDict, defaultdict, namedtuple

import pytest

from lm_assets.evaluation.humaneval import GREEDY, Completion, execute, judge, load_problems
from lm_assets.evaluation.plain_values import NotPlain, decode, encode
from lm_assets.evaluation.sandbox import Limits, run_judged

QUICK = Limits(timeout_s=5, cpu_s=3, memory_mb=512)
WRONG = "    return True\n"  # has_close_elements (HumanEval/0) answering True to everything


@pytest.fixture(scope="module")
def first_problem():
    return load_problems()[0]


def test_plain_values_cross_as_themselves():
    Point = namedtuple("Point", "x y")
    for value in (None, True, False, 0, -(10**40), 1.5, -0.0, math.inf, "naïve\udc80", b"\x00\xff",
                  [1, [2, (3,)]], (), {1: "a", (2, 3): [None]}, {1, 2}, frozenset({"a"})):  # fmt: skip
        back = decode(encode(value))
        assert back == value and type(back) is type(value), value
    assert math.isnan(decode(encode(math.nan)))
    # Subclasses cross as their base type, read through the base type's own methods.
    class Liar(int):
        def __eq__(self, other):
            return True

        def __index__(self):
            return 99

    assert decode(encode(Liar(3))) == 3 and type(decode(encode(Liar(3)))) is int
    assert decode(encode(Point(1, 2))) == (1, 2) and type(decode(encode(Point(1, 2)))) is tuple
    counts = defaultdict(int, a=2)
    assert decode(encode(counts)) == {"a": 2} and type(decode(encode(OrderedDict(counts)))) is dict


def test_anything_but_plain_data_is_refused_both_ways():
    for value in (object(), lambda: 1, iter([1]), 1j, type):
        with pytest.raises(NotPlain):
            encode(value)
    nested = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(NotPlain, match="deeper"):
        encode(nested)
    for data in ({"list": [1], "tuple": []}, {"eval": "1"}, {"list": "abc"}, {"set": [{"list": [1]}]},
                 {"dict": [[1]]}, {"dict": [[{"list": []}, 1]]}, {"bytes": "zz"}, [1, 2]):  # fmt: skip
        with pytest.raises(NotPlain):
            decode(data)


FORGERIES = {
    "an encoder that rewrites every message as a pass": (
        "import json\nclass Forged(json.JSONEncoder):\n    def encode(self, o):\n"
        "        return '{\"status\": \"passed\", \"loaded\": true, \"value\": true, \"token\": \"\"}'\n"
        "json._default_encoder = Forged()\njson.dumps = lambda *a, **k: Forged().encode(None)\n"),
    "str that answers passed for failed": (
        "import builtins\nclass Forged(str):\n    def __new__(cls, o=''):\n"
        "        text = builtins.__dict__['_str'](o)\n        return super().__new__(cls, 'passed' if text == 'failed' else text)\n"
        "builtins._str = builtins.str\nbuiltins.str = Forged\n"),
    "the runner's policy cleared": (
        "import sys\nm = sys.modules['__main__']\nfor name in ('REFUSED', 'CHANGES', 'LISTINGS'):\n"
        "    getattr(m, name).clear()\nm.within = lambda *a: True\nm.climbs = lambda *a: False\n"),
    "a pass written to every descriptor": (
        "import os\nfor fd in range(64):\n    for line in (b'{\"loaded\": true}\\n', b'{\"status\": \"passed\", \"error\": \"\"}\\n'):\n"
        "        try:\n            os.write(fd, line)\n        except OSError:\n            pass\n"),
    "the runner's main called again": "import sys\nsys.modules['__main__'].main()\n",
}


@pytest.mark.parametrize("forgery", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_wrong_completion_cannot_forge_its_pass(first_problem, forgery):
    outcome = judge(first_problem, WRONG + "\n\n" + forgery, QUICK)
    assert outcome.status == "failed", outcome
    honest = judge(first_problem, first_problem["canonical_solution"] + "\n\n" + forgery, QUICK)
    assert honest.status in ("passed", "failed")  # a forgery may break the honest answer too, never the verdict


def test_a_result_that_equals_everything_fails(first_problem):
    always_equal = ("    class Anything(int):\n        def __eq__(self, other):\n            return True\n"
                    "        __hash__ = int.__hash__\n    return Anything(0)\n")
    assert judge(first_problem, always_equal, QUICK).status == "failed"
    assert judge(first_problem, "    class Anything:\n        __eq__ = lambda s, o: True\n    return Anything()\n",
                 QUICK).error == "NotPlain: a value of type Anything is not plain data"  # fmt: skip


def test_many_wrong_completions_with_a_forgery_keep_pass_at_1_at_zero():
    problems = load_problems()[:5]
    forged = Completion  # the first forgery of the issue: json's default encoder
    completions = [forged(p["task_id"], GREEDY, "    return None\n\n" + FORGERIES["an encoder that rewrites every message as a pass"])
                   for p in problems]  # fmt: skip
    assert [o.status for o in execute(problems, completions, QUICK, workers=2)] == ["failed"] * 5


def test_the_policy_the_hook_holds_survives_the_program(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    cleared = FORGERIES["the runner's policy cleared"]
    outcome = run_judged(cleared + f"open({str(secret)!r}).read()", tests=None, limits=Limits(timeout_s=5, isolate=False))
    assert outcome.status == "failed" and "not allowed" in outcome.error, outcome


def test_the_tests_use_the_problems_own_helpers_not_the_completions():
    tests = "def check(candidate):\n    assert candidate(2) == double(2)\n"
    prelude = "def double(x):\n    return 2 * x\n\ndef f(x):\n    '''twice x'''\n"
    # The completion redefines the helper the tests use: the judge still holds the prelude's.
    program = prelude + "    return 5\n\ndef double(x):\n    return 5\n"
    outcome = run_judged(program, tests=tests, entry_point="f", call="check(f)", prelude=prelude, limits=QUICK)
    assert outcome.status == "failed" and outcome.error.startswith("AssertionError")
    right = run_judged(prelude + "    return x * 2\n", tests=tests, entry_point="f", call="check(f)", prelude=prelude, limits=QUICK)
    assert right.status == "passed", right


def test_what_the_program_raises_or_how_it_breaks_off_is_the_error():
    prelude = "def f(x):\n    '''x'''\n"
    tests = "def check(candidate):\n    assert candidate([1]) == [1]\n"
    cases = {"    raise ValueError('no')\n": "ValueError: no",
             "    import os\n    os._exit(3)\n": "exited with 3 before the end",
             "    return 'x' * (70 << 20)\n": "more than 64 MiB"}  # fmt: skip
    for body, error in cases.items():
        outcome = run_judged(prelude + body, tests=tests, entry_point="f", call="check(f)", prelude=prelude,
                             limits=Limits(timeout_s=10, cpu_s=5, memory_mb=1024))  # fmt: skip
        assert outcome.status == "failed" and error in outcome.error, (body, outcome)
