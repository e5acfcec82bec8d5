"""The instance configs in deploy/ validate against Dagster's instance schema."""

import shutil
from pathlib import Path

import pytest
from dagster._core.instance.config import dagster_instance_config

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


@pytest.mark.parametrize("name", ["dagster.yaml", "dagster-production.yaml"])
def test_instance_config_is_valid(tmp_path, monkeypatch, name):
    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB",
                "LM_ASSETS_K8S_NAMESPACE", "LM_ASSETS_LOG_BUCKET"):
        monkeypatch.setenv(var, "x")
    shutil.copy(DEPLOY / name, tmp_path / "dagster.yaml")
    config, _ = dagster_instance_config(str(tmp_path))
    if name == "dagster-production.yaml":
        assert config["run_launcher"]["class"] == "K8sRunLauncher"
        assert "postgres" in config["storage"]
