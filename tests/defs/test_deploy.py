"""The instance configs in deploy/ validate against Dagster's instance schema; the code server's
port is open only to the Dagster webserver and daemon."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config
from dagster_k8s.utils import get_common_labels

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


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


def manifests(name: str) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / name).read_text())}


def code_server_port() -> int:
    cmd = json.loads((DEPLOY / "Dockerfile").read_text().split("\nCMD ", 1)[1].splitlines()[0])
    return int(cmd[cmd.index("-p") + 1])


def selects(selector: dict, labels: dict) -> bool:
    assert set(selector) == {"matchLabels"}
    return selector["matchLabels"].items() <= labels.items()


def test_code_server_is_reached_through_a_cluster_ip_service():
    deployment, service = manifests("code-server.yaml").values()
    pod = deployment["spec"]["template"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [code_server_port()]
    assert [p["port"] for p in service["spec"]["ports"]] == [code_server_port()]


def test_network_policy_admits_only_the_dagster_webserver_and_daemon_to_the_code_server_port():
    policy = manifests("code-server-network-policy.yaml")["NetworkPolicy"]
    code_server_pod = manifests("code-server.yaml")["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], code_server_pod)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": code_server_port()}]
    # An empty or missing `from` admits every pod; a namespaceSelector or ipBlock reaches further.
    assert rule.get("from") and all(set(peer) == {"podSelector"} for peer in rule["from"])
    selectors = [peer["podSelector"] for peer in rule["from"]]
    helm_pod = {"app.kubernetes.io/name": "dagster", "app.kubernetes.io/instance": "dagster"}
    for component in ("dagster-webserver", "dagster-daemon"):
        assert any(selects(s, {**helm_pod, "component": component}) for s in selectors)
    run_pod = {**get_common_labels(), "app.kubernetes.io/component": "run_worker"}
    for outsider in (run_pod, {**helm_pod, "component": "user-deployments"}, code_server_pod, {}):
        assert not any(selects(s, outsider) for s in selectors)
