#!/usr/bin/env bash
# Screenshots of the Dagster UI after `make demo`, taken with headless Chromium:
#   scripts/ui_screenshots.sh OUT_DIR [PORT]
# Starts `make ui` on PORT (default 3123), waits for it, captures each page below, then stops it.
set -euo pipefail
out=${1:?usage: scripts/ui_screenshots.sh OUT_DIR [PORT]}
port=${2:-3123}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no Chromium found (apt install chromium)" >&2; exit 1; }
mkdir -p "$out"
log="$out/ui.log"
# dagster dev ignores SIGINT/SIGTERM when started from a script: reset them before it starts.
PORT=$port .venv/bin/python -c "import os,signal,sys; signal.signal(signal.SIGINT,signal.SIG_DFL); signal.signal(signal.SIGTERM,signal.SIG_DFL); os.execvp(sys.argv[1],sys.argv[1:])" make ui >"$log" 2>&1 &
ui=$!
trap 'kill -- -$ui 2>/dev/null || kill $ui 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/server_info" >/dev/null && break
  sleep 1
done
shoot() {  # name path
  "$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1300 \
    --virtual-time-budget=20000 --screenshot="$out/$1.png" "http://127.0.0.1:$port$2" >/dev/null 2>&1
  echo "$out/$1.png  <- $2"
}
shoot training_run "/assets/training_run"
shoot mmlu_trend "/assets/mmlu_score?view=plots"
shoot mmlu_latest "/assets/mmlu_score"
shoot curated_shard_checks "/assets/curated_shard?view=checks"
shoot curated_shard_partitions "/assets/curated_shard?view=partitions"
shoot curated_shard "/assets/curated_shard"
shoot packed_dataset "/assets/packed_dataset"
shoot runs "/runs"
