"""workspace.yaml: the one declaration of the code location, read by `make ui`, the CLI and the image."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lm_assets.app.cli import code_location, dagster_argv

ROOT = Path(__file__).resolve().parents[2]


def test_the_workspace_declares_the_code_location():
    assert code_location() == {
        "module_name": "lm_assets.definitions", "location_name": "lm_assets", "working_directory": str(ROOT),
    }
    assert "[tool.dagster]" not in (ROOT / "pyproject.toml").read_text()


def test_dagster_commands_are_pointed_at_it(tmp_path):
    materialize = dagster_argv(["asset", "materialize"], ["--select", "raw_shard"])
    assert materialize[1:] == ["asset", "materialize", "-m", "lm_assets.definitions", "-d", str(ROOT), "--select", "raw_shard"]
    server = dagster_argv(["code-server", "start"], ["-p", "4000"])
    assert server[-6:] == ["-d", str(ROOT), "--location-name", "lm_assets", "-p", "4000"]
    other = tmp_path / "workspace.yaml"
    other.write_text("load_from:\n  - python_module: {module_name: a.defs}\n  - python_module: {module_name: b.defs}\n")
    with pytest.raises(SystemExit, match="expected one python_module entry under load_from, found 2"):
        code_location(str(other))


def test_make_ui_and_the_image_use_it():
    assert "dagster dev -w workspace.yaml" in (ROOT / "Makefile").read_text()
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert json.loads(dockerfile.split("\nCMD ", 1)[1].splitlines()[0])[:2] == ["lm-assets", "code-server"]
    assert "workspace.yaml" in dockerfile.split("COPY pyproject.toml", 1)[1].splitlines()[0]


def test_dagster_loads_the_workspace_file(tmp_path):
    dagster = Path(sys.executable).parent / "dagster"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    run = subprocess.run([dagster, "definitions", "validate", "-w", ROOT / "workspace.yaml"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Validation successful for code location lm_assets" in run.stdout + run.stderr


def test_check_instance_refuses_an_instance_that_is_not_on_postgres(tmp_path, monkeypatch, capsys):
    from lm_assets.app.cli import main

    (tmp_path / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    assert main(["check-instance"]) == 0 and "SqliteRunStorage" in capsys.readouterr().out
    assert main(["check-instance", "--postgres"]) == 2
    assert "is not on PostgreSQL" in capsys.readouterr().err


def test_postgres_home_says_why_no_server_started(tmp_path, capsys):
    from lm_assets.app.cli import main

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["postgres-home", str(blocked / "home")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lm-assets postgres-home: no PostgreSQL server under") and "Traceback" not in err
