"""The scan of a spiked step's sequences: degenerate runs and characters no text should hold."""

import numpy as np

from lm_assets.training.forensics import longest_run, scan


def test_the_longest_run_and_a_degenerate_sequence():
    assert longest_run(np.array([5, 5, 6, 6, 6, 2], dtype=np.int64)) == (6, 3)
    assert longest_run(np.array([], dtype=np.int64)) == (-1, 0)
    assert scan(np.full(200, 9))["degenerate"] and not scan(np.arange(200))["degenerate"]
    assert scan(np.array([4] * 70 + list(range(500))))["degenerate"]  # 64 in a row, in a long sequence


def test_control_and_replacement_characters_are_counted_in_the_decoded_text():
    found = scan(np.array([1, 2, 3]), decode=lambda ids: "tab\tand\nline are fine, \x00 and \x1b are not: \ufffd")
    assert (found["control_chars"], found["replacement_chars"]) == (2, 1)
