"""The demo's terminal stays quiet: runs and their subprocesses write to a log, and each run is one line."""

import subprocess
import sys

import dagster as dg

from lm_assets.demo import output_to, step_line


def test_output_of_the_process_and_its_children_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "logs" / "demo.log"
    with output_to(log) as terminal:
        print("from the process")
        print("to stderr", file=sys.stderr)
        subprocess.run([sys.executable, "-c", "import sys; print('from a child'); print('child err', file=sys.stderr)"], check=True)
        print("progress line", file=terminal, flush=True)
    print("after")
    out, err = capfd.readouterr()
    assert out == "progress line\nafter\n" and err == ""
    assert log.read_text().split() == ["from", "the", "process", "to", "stderr", "from", "a", "child", "child", "err"]


def test_a_run_is_one_line_with_its_documents_in_and_out():
    @dg.asset
    def first():
        return dg.MaterializeResult(metadata={"records_in": 144, "documents_out": 130})

    @dg.asset(deps=[first])
    def second():
        return dg.MaterializeResult(metadata={"documents_in": 130, "documents_out": 125})

    @dg.asset
    def no_documents():
        return dg.MaterializeResult(metadata={"rows": 3})

    line = step_line("first → second", dg.materialize([first, second]), 1.23)
    assert line.split() == ["ok", "1.2", "s", "first", "→", "second", "144", "→", "125", "documents"]
    assert step_line("no_documents", dg.materialize([no_documents]), 0.5).split() == ["ok", "0.5", "s", "no_documents"]
