"""The Dagster UI draws the inline pictures: scripts/ui_screenshots.py against `make ui`, in headless
Chromium (Playwright comes with the dev extra). The captures are skipped only where no Chromium is installed."""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from lm_assets.app.process_tree import stop_tree
from lm_assets.defs.training.assets import curves_markdown

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian's chromium package)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_chromium
def test_the_training_page_draws_its_curves_in_place(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy/dagster.yaml", home / "dagster.yaml")
    history = [{"step": s, "loss": 8 - math.log(s), "lr": 1e-3 * min(1, s / 4)} for s in range(1, 41)]
    history[19]["val_loss"], history[39]["val_loss"] = 5.4, 4.6
    curves = curves_markdown(history)
    instance = dg.DagsterInstance.from_config(str(home))
    instance.report_runless_asset_event(dg.AssetMaterialization(
        "training_run", metadata={"curves": dg.MetadataValue.md(curves), "final_loss": 4.3}))
    instance.dispose()
    out = tmp_path / "shots"
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/ui_screenshots.py"), str(out), "--only", "training_run",
         "--port", str(free_port()), "--chromium", CHROMIUM],
        env={**os.environ, "DAGSTER_HOME": str(home)},
    )
    try:
        assert script.wait(timeout=600) == 0
    finally:
        if script.poll() is None:  # `make ui` and Chromium, which the script stops once it ends
            stop_tree(script.pid)
            script.wait()
    page = json.loads((out / "report.json").read_text())["training_run"]
    assert not page["error"]
    assert curves.startswith("![") and curves[2:curves.index("]")] in page["alts"]  # the chart's alt text
    assert page["rendered"] >= 1 and page["rendered"] == page["images"]
    assert (out / "training_run.png").stat().st_size > 10_000


def test_the_script_says_how_to_use_it_without_playwright(tmp_path):
    # Runs everywhere, Chromium or not: a playwright that cannot be imported, as before `make install-dev`.
    broken = tmp_path / "playwright"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('No module named playwright')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    script = str(ROOT / "scripts/ui_screenshots.py")
    shown = subprocess.run([sys.executable, script, "--help"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0 and "--chromium" in shown.stdout
    capture = subprocess.run([sys.executable, "-c", f"import runpy; runpy.run_path({script!r})['playwright_api']()"],
                             env=env, capture_output=True, text=True)
    assert capture.returncode == 1 and "ui_screenshots needs playwright" in capture.stderr
    assert "make install-dev" in capture.stderr


def test_the_script_captures_the_pages_whose_numbers_must_read_true():
    import runpy

    pages = {name: path for name, path, _ in runpy.run_path(str(ROOT / "scripts/ui_screenshots.py"))["PAGES"]}
    for asset in ("benchmark_suite", "hellaswag_score", "position_perplexity", "safety_score", "bbq_score",
                  "curation_summary", "quality_classifier", "dpo_run"):
        assert pages[asset] == f"/assets/{asset}"
    assert "mmlu_score_check_plots" in pages and pages["run_limit_sensor"].endswith("/sensors/run_limit_sensor")
