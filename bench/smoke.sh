#!/usr/bin/env bash
# Smoke test of bench/: every module the bench scripts import, then each script in its tiny mode
# (`--smoke`, or train_gpu.sh's `--dry-run`): seconds each, offline, on inputs shipped in the
# repository or built by the script, in two lanes side by side. OUT is a temporary folder, removed
# afterwards. It fails on the first error, and when the scripts changed anything in the working tree
# (ignored files included, .venv/ aside).
#
#   make bench-smoke                                  # installs the bench extra first
#   PYTHON=.venv/bin/python bash bench/smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
OUT="$(mktemp -d "${TMPDIR:-/tmp}/lm-bench-smoke.XXXXXX")"
export OUT PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
trap 'rm -rf "$OUT"' EXIT

working_tree() { git status --porcelain --ignored --untracked-files=all -- . ':(exclude).venv'; }
before="$(working_tree)"
started=$SECONDS

echo "== imports of bench/*.py and bench/*/*.py"
"$PY" - <<'EOF'
import ast
import importlib
import sys
from pathlib import Path

scripts = sorted(Path("bench").rglob("*.py"))
local = {path.stem for path in Path("bench").glob("*.py")} | {"benchlib"}  # imported from bench/ itself
optional = {"rs_trafilatura"}  # wheels for CPython 3.12 only; extraction_quality.py skips it when missing
wanted: dict[str, set[str]] = {}
for path in scripts:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                wanted.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.setdefault(node.module, set()).update(alias.name for alias in node.names)
count = 0
for name, members in sorted(wanted.items()):
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in local | optional or top == "__future__":
        continue
    module = importlib.import_module(name)
    for member in members:
        if not hasattr(module, member):
            importlib.import_module(f"{name}.{member}")
    count += 1
print(f"{count} modules import")
EOF

# Two lanes, one per core, each in an OUT of its own (scripts reuse folders there, such as the smoke
# crawl). The training benches share a lane: torch.distributed binds its default port.
LANE_A=(
    "$PY bench/curation_quality.py --smoke"
    "env PYTHON=$PY bash bench/train_gpu.sh --dry-run"
    "$PY bench/train_cpu.py --smoke"
    "$PY bench/curation.py --smoke"
    "$PY bench/eval_agreement.py --smoke"
    "$PY bench/eval_agreement.py --tasks all --smoke"
    "$PY bench/humaneval_agreement.py --smoke"
    "$PY bench/tokens.py --smoke"
    "$PY bench/reliability.py --smoke"
    "$PY bench/speculative_decoding.py --smoke"
    "$PY bench/wcxb_extraction.py --smoke"
)
LANE_B=(
    "$PY bench/quality_classifier.py --smoke"
    "$PY bench/curation_quality.py --smoke --text-path"
    "$PY bench/dagster_overhead.py --smoke"
    "$PY bench/shard_memory.py --smoke"
    "$PY bench/dedup_quality.py --smoke"
    "$PY bench/dedup_speed.py --smoke"
    "$PY bench/toxicity_speed.py --smoke"
    "$PY bench/dedup_scale.py --smoke"
    "$PY bench/build_crawl.py --smoke"
    "$PY bench/extraction_quality.py --smoke"
    "$PY bench/dev_set/make_test_slice.py --smoke"
    "$PY bench/quality_transfer.py --smoke"
    "$PY bench/lora_footprint.py --smoke"
)
ran=("${LANE_A[@]}" "${LANE_B[@]}")

# Runs its commands in order and stops at the first that fails, printing its log.
lane() {
    local name=$1 command t0
    shift
    export OUT="$OUT/$name"
    mkdir -p "$OUT"
    for command in "$@"; do
        t0=$SECONDS
        # shellcheck disable=SC2086 # a command line of words without spaces of their own
        if $command >"$OUT/log" 2>&1; then
            echo "== $command: ok ($((SECONDS - t0)) s)"
        else
            echo "== $command: FAILED"
            cat "$OUT/log"
            return 1
        fi
    done
}
lane a "${LANE_A[@]}" &
lane_a=$!
lane b "${LANE_B[@]}" &
lane_b=$!
failed=0
wait "$lane_a" || failed=1
wait "$lane_b" || failed=1
[ "$failed" = 0 ] || exit 1

for script in bench/*.py bench/*.sh bench/dev_set/*.py; do
    # the Python that train_gpu.sh runs, and this file
    case "$script" in bench/train_gpu.py | bench/smoke.sh) continue ;; esac
    if [[ " ${ran[*]} " != *" $script "* ]]; then
        echo "$script has no smoke run: add one to bench/smoke.sh"
        exit 1
    fi
done
after="$(working_tree)"
if [ "$before" != "$after" ]; then
    echo "the bench scripts changed the working tree:"
    diff <(echo "$before") <(echo "$after") || true
    exit 1
fi
echo "bench smoke: every script ran, nothing written into the working tree ($((SECONDS - started)) s)"
