"""Training on Kubernetes, tested up to the Kubernetes API: the generated manifest, and the Pipes S3
context and message path against a real S3-protocol server, with the job's rank-0 container run
locally by a stand-in for the cluster."""

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import dagster as dg
import pytest

from lm_assets.defs.training.kubernetes import ClusterSpec, job_state, pytorch_job_manifest
from lm_assets.defs.common.resources import StorageResource, s3_resource_from_env
from lm_assets.defs.training.assets import TrainingLauncher, training_run_and_checkpoint
from tests.defs.test_training_asset import packed_storage  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[2]


def test_manifest_content():
    cluster = ClusterSpec(image="registry.example/lm-assets:1.0", namespace="ml", nodes=4, gpus_per_node=8)
    train_config = {"data": "/data/packed", "parallel": {"pp": 2, "tp": 4, "dp": 4}, "steps": 1000}
    manifest = pytorch_job_manifest("lm-run", train_config, cluster, {"DAGSTER_PIPES_CONTEXT": "ctx", "DAGSTER_PIPES_MESSAGES": "msg"})
    job, config_map = manifest["job"], manifest["config_map"]
    assert job["kind"] == "PyTorchJob" and job["apiVersion"] == "kubeflow.org/v1"
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/lm-assets:1.0"
    assert container["command"] == [
        "torchrun", "--nnodes=4", "--nproc_per_node=8", "-m", "lm_assets.training.train", "--config", "/etc/lm-assets/train.json"
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["DAGSTER_PIPES_CONTEXT"] == "ctx" and env["DAGSTER_PIPES_MESSAGES"] == "msg"
    assert env["LM_ASSETS_PIPES_MESSAGES"] == "s3"
    assert json.loads(config_map["data"]["train.json"]) == train_config
    volumes = {v["name"]: v for v in replicas["Master"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "lm-run-config"
    assert "Worker" not in pytorch_job_manifest("one", train_config, ClusterSpec(image="x", nodes=1), {})["job"]["spec"]["pytorchReplicaSpecs"]
    assert job_state({"status": {"conditions": [{"type": "Running", "status": "True"}]}}) is None
    assert job_state({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}) == "Succeeded"


class LocalCluster:
    """Stands in for the Kubernetes API: runs the Master's container command here, as rank 0 of a
    one-process job, with the container's environment and the ConfigMap mounted from a folder."""

    def __init__(self, mounts: dict[str, Path]):
        self.mounts = mounts
        self.config_maps: dict[str, dict] = {}
        self.jobs: dict[str, dict] = {}

    def create_namespaced_config_map(self, namespace, body):
        self.config_maps[body["metadata"]["name"]] = body

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        name = body["metadata"]["name"]
        container = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
        config_dir = self.mounts["config"]
        config_dir.mkdir(parents=True, exist_ok=True)
        train = json.loads(self.config_maps[f"{name}-config"]["data"]["train.json"])
        text = json.dumps(train).replace("/data", str(self.mounts["data"]))
        (config_dir / "train.json").write_text(text)
        env = {**os.environ, **{e["name"]: e["value"] for e in container["env"]}, "DS_ACCELERATOR": "cpu"}
        command = [sys.executable, "-m", "lm_assets.training.train", "--config", str(config_dir / "train.json")]
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        self.last_stderr = done.stderr
        state = "Succeeded" if done.returncode == 0 else "Failed"
        self.jobs[name] = {"status": {"conditions": [{"type": state, "status": "True"}]}}
        self.created = body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        return self.jobs[name]


@pytest.mark.slow
def test_training_on_kubernetes_reports_through_s3(packed_storage, s3_server, tmp_path, monkeypatch):  # noqa: F811
    from lm_assets.defs.training import kubernetes

    cluster = LocalCluster({"data": packed_storage, "config": tmp_path / "config"})
    original = kubernetes.KubernetesTrainingClient.__init__

    def with_local_cluster(self, *args, **kwargs):
        original(self, *args, **kwargs, api=cluster, core_api=cluster, poll_seconds=0.1)

    monkeypatch.setattr(kubernetes.KubernetesTrainingClient, "__init__", with_local_cluster)
    s3 = s3_resource_from_env()
    resources = {
        "storage": StorageResource(root=str(packed_storage), s3=s3),
        "training_launcher": TrainingLauncher(backend="kubernetes", pipes_bucket=s3_server.bucket, cluster=ClusterSpec(nodes=1, gpus_per_node=1), s3=s3),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    config = {"ops": {"training_run": {"config": {"steps": 4, "save_every": 2, "micro_batch_size": 2, "pp": 1}}}}
    result = dg.materialize([training_run_and_checkpoint], instance=dg.DagsterInstance.ephemeral(), resources=resources, run_config=config)
    assert result.success, cluster.last_stderr[-2000:]
    meta = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("training_run")}
    assert meta["training_run"]["steps"].value == 4
    assert meta["checkpoint"]["tag"].value == "step_00000004"
    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_server.endpoint).list_objects_v2(Bucket=s3_server.bucket).get("Contents", [])]
    assert any(k.endswith(".json") for k in keys)  # Pipes messages went through the bucket
    env = {e["name"] for e in cluster.created["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"]}
    assert {"DAGSTER_PIPES_CONTEXT", "DAGSTER_PIPES_MESSAGES", "LM_ASSETS_PIPES_MESSAGES"} <= env
