"""The demo's terminal stays quiet: runs and their subprocesses write to a log, and each run is one line."""

import subprocess
import sys

import dagster as dg

from lm_assets.app.demo import echoed_progress, output_to, step_line


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


def test_training_progress_lines_reach_the_terminal(tmp_path, capfd):
    log = tmp_path / "demo.log"
    with output_to(log) as terminal, echoed_progress(log, terminal):
        child = "import sys; [print(line, file=sys.stderr, flush=True) for line in sys.argv[1:]]"
        subprocess.run([sys.executable, "-c", child, "[rank 0] step 10/40  loss 7.5205  tokens/s 9,093  eta 16 s",
                        "[rank 1] step 10/40 from another rank", '{"step": 10, "loss": 7.52}'], check=True)
        print("[rank 0] step 40/40  loss 6.1", flush=True)
    out, _ = capfd.readouterr()
    assert [line.strip() for line in out.splitlines()] == [
        "training step 10/40  loss 7.5205  tokens/s 9,093  eta 16 s", "training step 40/40  loss 6.1"
    ]


def test_the_drop_reasons_print_one_row_per_stage():
    import polars as pl

    from lm_assets.app.demo import reasons_by_stage

    counts = pl.DataFrame({"stage": ["raw", "langid", "raw", "langid"], "reason": ["a", "lang:ja", "b", "lang:de"],
                           "docs": [37, 3, 6, 1]})  # fmt: skip
    assert reasons_by_stage(counts).rows() == [("raw", 43, "a 37, b 6"), ("langid", 4, "lang:ja 3, lang:de 1")]
