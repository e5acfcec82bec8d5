"""Loading the code location stays light and quiet: no ML framework is imported until an asset runs,
and nothing is written to stderr (no warnings)."""

import json
import os
import subprocess
import sys
from pathlib import Path

# Imported by the assets that use them, never by `import lm_assets.definitions`.
HEAVY_MODULES = [
    "torch",
    "transformers",
    "deepspeed",
    "great_expectations",
    "detoxify",
    "sklearn",
    "fasttext",
    "datasketch",
    "duckdb",
    "pyarrow",
    "pandas",
    "safetensors",
    "dagster_aws",
    "boto3",
]

PROBE = """
import json, sys
import lm_assets.definitions
print(json.dumps(sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)))
"""


def test_loading_the_code_location_imports_no_heavy_module_and_prints_nothing():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # Python's default warning filters
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY_MODULES)],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2], env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert done.stderr == ""


def test_every_sensor_and_schedule_is_described_and_in_the_reference():
    from pathlib import Path

    from lm_assets.definitions import defs

    reference = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    automations = [*defs.sensors, *defs.schedules]
    assert len(automations) >= 4
    for item in automations:
        assert item.description and len(item.description) > 40, item.name
    # Dagster adds the automation-condition sensor itself: the reference lists it with ours.
    for item in [*defs.get_repository_def().sensor_defs, *defs.schedules]:
        assert f"| `{item.name}` |" in reference, item.name
