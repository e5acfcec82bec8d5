"""Screenshots of the Dagster UI after `make demo`, taken with headless Chromium through Playwright.

    .venv/bin/python scripts/ui_screenshots.py OUT_DIR [--port 3123] [--chromium /usr/bin/chromium]

Playwright comes with the dev extra (`make install-dev`); the browser is the system's Chromium (Debian's
`chromium` package), nothing is downloaded. Starts `make ui` on the port (on the instance in
$DAGSTER_HOME), captures the pages below (the training run, the evaluation trend across checkpoints, a
shard's checks and quality histograms per partition, the readable previews, the Launchpad of
`shard_curation_job` with a shard picked, the Automation page, a checkpoint's samples, and the pages whose
numbers must read true: benchmark_suite's chance bands, the trend tables, the checks' plots, safety_score,
bbq_score, position_perplexity, curation_summary's histograms, quality_classifier, dpo_run and a sensor),
writes what each page shows to `report.json` (its images, how many rendered, whether Launch is enabled,
whether the page scrolls sideways or cuts an image, whether `nan` shows), then stops it.
`--only training_run,curated_shard_partition` takes some of the pages.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path


# name, path, then the texts to click in order (a tab, a check, ...; `placeholder:X` is the input whose
# placeholder is X); where a text shows more than once, the last visible one is clicked (a check's own
# Partitions tab comes after the asset's).
PAGES = [
    ("training_run", "/assets/training_run", []),
    ("training_run_curves", "/assets/training_run", ["[Show Markdown]"]),
    ("checkpoint", "/assets/checkpoint", []),
    ("perplexity_plots", "/assets/perplexity", ["Plots"]),
    ("mmlu_score", "/assets/mmlu_score", []),
    ("mmlu_score_plots", "/assets/mmlu_score", ["Plots"]),
    ("mmlu_score_events", "/assets/mmlu_score?view=events", []),
    ("mmlu_score_partitions", "/assets/mmlu_score?view=partitions", []),
    ("curated_shard_check_partitions", "/assets/curated_shard?view=checks", ["language_share", "Partitions"]),
    ("curated_shard_partition", "/assets/curated_shard?view=partitions&partition=crawl-00001.warc.gz", []),
    ("curated_shard", "/assets/curated_shard", []),
    ("raw_shard", "/assets/raw_shard", []),
    ("packed_dataset", "/assets/packed_dataset", []),
    ("curated_shard_full_text", "/assets/curated_shard", ["[Show Markdown]"]),
    ("runs", "/runs", []),
    ("automation", "/automation", []),
    ("checkpoint_samples", "/assets/checkpoint_samples?view=partitions", []),
    # The pages whose numbers and charts must tell the truth: chance bands inside [0, 1], no `nan` for a
    # number, no chart of one point or of a constant, each run plotted apart, nothing clipped at 1600 px.
    ("benchmark_suite", "/assets/benchmark_suite", []),
    ("hellaswag_score", "/assets/hellaswag_score", []),
    ("hellaswag_score_trend", "/assets/hellaswag_score", ["[Show Markdown]"]),
    ("mmlu_score_checks", "/assets/mmlu_score?view=checks", ["chance_while_untrained"]),
    ("mmlu_score_check_plots", "/assets/mmlu_score?view=checks", ["chance_while_untrained", "Plots"]),
    ("position_perplexity", "/assets/position_perplexity", []),
    ("safety_score", "/assets/safety_score", []),
    ("safety_score_plots", "/assets/safety_score", ["Plots"]),
    ("bbq_score", "/assets/bbq_score", []),
    ("curation_summary", "/assets/curation_summary", []),
    ("curation_summary_histograms", "/assets/curation_summary", ["[Show Markdown]"]),
    ("quality_classifier", "/assets/quality_classifier", []),
    ("dpo_run", "/assets/dpo_run", []),
    ("run_limit_sensor", "/locations/lm_assets/sensors/run_limit_sensor", []),
    # The job's Launchpad, its first shard picked in the partition selector, the scaffold expanded.
    ("curated_shard_launchpad", "/locations/lm_assets/jobs/shard_curation_job/playground",
     ["placeholder:Partition", "crawl-00000.warc.gz"]),
]
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def default_chromium() -> str | None:
    """Debian's Chromium where it is installed, else a chromium on the PATH."""
    return next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), None) or shutil.which("chromium") \
        or shutil.which("chromium-browser")


def playwright_api():
    """Playwright's sync API, imported when a capture starts, so that `--help` works without it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise SystemExit(
            f"ui_screenshots needs playwright ({exc}): it comes with the dev extra, `make install-dev` or "
            "`.venv/bin/pip install -e '.[dev]'`; the browser is the system's Chromium (`apt-get install chromium`)"
        ) from exc
    return sync_playwright


def wait_for(url: str, seconds: int = 180) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer in {seconds} s")


def capture(out: Path, port: int, chromium: str, pages: list[tuple] = PAGES) -> dict:
    """Screenshots of `pages` under `out`, and what each shows (`page_report`), also in `out/report.json`."""
    report = {}
    with playwright_api()() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        # The UI scrolls inside its own panes, so a tall window shows a whole page.
        page = browser.new_page(viewport={"width": 1600, "height": 4000})
        for name, path, clicks in pages:
            page.goto(f"http://127.0.0.1:{port}{path}")
            page.wait_for_load_state("networkidle")
            skip = page.get_by_role("button", name="Skip")
            if skip.count():
                skip.first.click()
            for text in clicks:
                found = (page.get_by_placeholder(text.removeprefix("placeholder:")) if text.startswith("placeholder:")
                         else page.get_by_text(text, exact=True))
                visible = [m for m in found.all() if m.is_visible()]
                if not visible or not visible[-1].is_enabled():
                    # A disabled "Scaffold missing config" means nothing is missing.
                    print(f"  {name}: nothing to click named {text!r}; the page as it is")
                    continue
                visible[-1].click(timeout=10_000)
                page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            report[name] = page_report(page)
            print(out / f"{name}.png", "<-", path, *clicks, report[name])
        browser.close()
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def page_report(page) -> dict:
    """What the page shows: its title text's presence, and its images, each rendered or not (an `<img>`
    whose picture decoded has a non-zero natural size)."""
    images = page.evaluate(
        "() => Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, "
        "width: i.naturalWidth, height: i.naturalHeight}))"
    )
    # Whether anything is wider than what holds it: the page scrolls sideways, an image is cut by its box, or a
    # table runs past the metadata cell it is shown in or the pane that clips it (named by its header row).
    overflow = page.evaluate(
        "() => ({page: document.documentElement.scrollWidth > document.documentElement.clientWidth, "
        "images: Array.from(document.images).filter(i => i.parentElement && "
        "i.getBoundingClientRect().right > i.parentElement.getBoundingClientRect().right + 1).map(i => i.alt), "
        "tables: Array.from(document.querySelectorAll('td table')).filter(t => { "
        "  let box = t.parentElement; "
        "  while (box && box !== document.body && getComputedStyle(box).overflowX === 'visible') box = box.parentElement; "
        "  const right = Math.min(t.parentElement.closest('td').getBoundingClientRect().right, "
        "                         box ? box.getBoundingClientRect().right : Infinity); "
        "  return t.getBoundingClientRect().right > right + 1; })"
        ".map(t => (t.rows[0] ? t.rows[0].innerText : '').replace(/\\s+/g, ' ').trim())})"
    )
    text = page.evaluate("() => document.body.innerText")
    return {
        "images": len(images),
        "scrolls_sideways": overflow["page"],
        "images_cut": sorted(set(overflow["images"])),
        "tables_cut": sorted(set(overflow["tables"])),
        "nan_shown": " nan " in f" {text} ".replace("|", " ").replace("\n", " "),
        "rendered": sum(1 for i in images if i["complete"] and i["width"] > 0 and i["height"] > 0),
        "alts": sorted({i["alt"] for i in images if i["alt"]}),
        "error": page.get_by_text("Unexpected GraphQL error").count() > 0,
        "launch_enabled": launch_enabled(page),
    }


def launch_enabled(page) -> bool | None:
    """On a Launchpad, whether its Launch button can be pressed (None elsewhere)."""
    buttons = [b for b in page.get_by_role("button").all() if b.is_visible() and (b.text_content() or "").strip()
               .startswith(("Launch Run", "Launch run", "Materialize"))]  # fmt: skip
    return buttons[-1].is_enabled() if buttons else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--port", type=int, default=3123)
    parser.add_argument("--chromium", default=default_chromium(), help="the Chromium to drive (default: Debian's)")
    parser.add_argument("--only", default="", help="comma-separated page names (default: all)")
    args = parser.parse_args()
    if not args.chromium:
        parser.error("no Chromium found: install Debian's (`apt-get install chromium`) or pass --chromium")
    only = set(filter(None, args.only.split(",")))
    pages = [p for p in PAGES if not only or p[0] in only]
    if only - {p[0] for p in PAGES}:
        parser.error(f"unknown pages: {sorted(only - {p[0] for p in PAGES})}")
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "ui.log", "w") as log:
        ui = subprocess.Popen(["make", "ui"], env={**os.environ, "PORT": str(args.port)}, stdout=log, stderr=log,
                              start_new_session=True, cwd=Path(__file__).resolve().parents[1])
        try:
            wait_for(f"http://127.0.0.1:{args.port}/server_info")
            capture(args.out, args.port, args.chromium, pages)
        finally:
            stop_group(ui)


def stop_group(make: subprocess.Popen, seconds: int = 30) -> None:
    """SIGTERM to `make ui`'s process group (make and lm_assets.app.process_tree, which stops dagster dev's
    processes), SIGKILL to what is left after `seconds`."""
    os.killpg(make.pid, signal.SIGTERM)
    deadline = time.time() + seconds
    while time.time() < deadline:
        make.poll()  # reaps make: until then its group is not empty
        try:
            os.killpg(make.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(make.pid, signal.SIGKILL)
    make.wait()


if __name__ == "__main__":
    main()
