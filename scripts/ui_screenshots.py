"""Screenshots of the Dagster UI after `make demo`, taken with headless Chromium through Playwright.

    pip install playwright            # any environment; the system Chromium is used, nothing is downloaded
    python scripts/ui_screenshots.py OUT_DIR [--port 3123] [--chromium /usr/bin/chromium]

Starts `make ui` on the port, captures the pages below (the training run, the evaluation trend across
checkpoints, a shard's checks per partition, the readable previews), then stops it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

# name, path, then the texts to click in order (a tab, a check, ...); where a text shows more than
# once, the last visible one is clicked (a check's own Partitions tab comes after the asset's).
PAGES = [
    ("training_run", "/assets/training_run", []),
    ("training_run_curves", "/assets/training_run", ["[Show Markdown]"]),
    ("mmlu_score", "/assets/mmlu_score", []),
    ("mmlu_score_plots", "/assets/mmlu_score", ["Plots"]),
    ("mmlu_score_events", "/assets/mmlu_score?view=events", []),
    ("mmlu_score_partitions", "/assets/mmlu_score?view=partitions", []),
    ("curated_shard_check_partitions", "/assets/curated_shard?view=checks", ["language_share", "Partitions"]),
    ("curated_shard_partition", "/assets/curated_shard?view=partitions&partition=crawl-00001.warc.gz", []),
    ("curated_shard", "/assets/curated_shard", []),
    ("raw_shard", "/assets/raw_shard", []),
    ("packed_dataset", "/assets/packed_dataset", []),
    ("packed_dataset_sequence", "/assets/packed_dataset", ["[Show Markdown]"]),
    ("curated_shard_full_text", "/assets/curated_shard", ["[Show Markdown]"]),
    ("runs", "/runs", []),
]


def wait_for(url: str, seconds: int = 180) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer in {seconds} s")


def capture(out: Path, port: int, chromium: str) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        # The UI scrolls inside its own panes, so a tall window shows a whole page.
        page = browser.new_page(viewport={"width": 1600, "height": 4000})
        for name, path, clicks in PAGES:
            page.goto(f"http://127.0.0.1:{port}{path}")
            page.wait_for_load_state("networkidle")
            skip = page.get_by_role("button", name="Skip")
            if skip.count():
                skip.first.click()
            for text in clicks:
                visible = [m for m in page.get_by_text(text, exact=True).all() if m.is_visible()]
                if not visible:
                    print(f"  {name}: nothing to click named {text!r}; the page as it is")
                    continue
                visible[-1].click()
                page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            print(out / f"{name}.png", "<-", path, *clicks)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--port", type=int, default=3123)
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "ui.log", "w") as log:
        ui = subprocess.Popen(["make", "ui"], env={**os.environ, "PORT": str(args.port)}, stdout=log, stderr=log,
                              start_new_session=True)
        try:
            wait_for(f"http://127.0.0.1:{args.port}/server_info")
            capture(args.out, args.port, args.chromium)
        finally:
            stop_group(ui.pid)


def stop_group(pgid: int, seconds: int = 30) -> None:
    """SIGTERM to `make ui` and the dagster processes under it, SIGKILL to what is left after `seconds`."""
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(pgid, signal.SIGKILL)


if __name__ == "__main__":
    main()
