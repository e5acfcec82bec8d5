"""The vLLM Deployment and Service: checked against the Kubernetes schema (the official client's models),
and the arguments vLLM is started with."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lm_assets.serving.vllm import VllmSpec, checkpoint_path, manifests_yaml, vllm_manifests

REPO = Path(__file__).resolve().parents[2]


def as_kubernetes(obj: dict, kind: str):
    """The object read into the client's model of `kind`: a missing required field or a wrong type raises."""
    from kubernetes.client import ApiClient

    class Response:
        data = json.dumps(obj)

    return ApiClient().deserialize(Response(), kind)


def test_the_manifests_fit_the_kubernetes_schema_and_serve_the_export():
    spec = VllmSpec(name="lm", model=checkpoint_path("dpo-step_00000030"), tensor_parallel=4,
                    draft=checkpoint_path("distill-step_00000200"), namespace="ml")  # fmt: skip
    objects = vllm_manifests(spec)
    deployment = as_kubernetes(objects["deployment"], "V1Deployment")
    service = as_kubernetes(objects["service"], "V1Service")
    container = deployment.spec.template.spec.containers[0]
    assert container.command[:3] == ["vllm", "serve", "/models/dpo/step_00000030/hf"]
    args = dict(zip(container.command[3::2], container.command[4::2]))
    assert args["--tensor-parallel-size"] == "4" and container.resources.limits == {"nvidia.com/gpu": "4"}
    assert json.loads(args["--speculative-config"]) == {"method": "draft_model", "model": "/models/distill/step_00000200/hf",
                                                        "num_speculative_tokens": 4}  # fmt: skip
    assert deployment.spec.selector.match_labels == service.spec.selector
    assert service.spec.ports[0].port == 8000 and container.ports[0].container_port == 8000
    mounts = {m.name: m for m in container.volume_mounts}
    assert mounts["checkpoints"].read_only and mounts["checkpoints"].mount_path == "/models"
    plain = vllm_manifests(VllmSpec(name="lm", model="/models/main/step_00000040/hf"))["deployment"]
    assert "--speculative-config" not in plain["spec"]["template"]["spec"]["containers"][0]["command"]


def test_a_path_outside_the_mounted_volume_or_a_bad_key_is_refused():
    with pytest.raises(ValueError, match="not under the mounted"):
        VllmSpec(name="lm", model="/elsewhere/hf")
    with pytest.raises(ValueError):
        VllmSpec(name="lm", model="/models/a/hf", tensor_parallel=0)
    with pytest.raises(Exception, match="\\.\\."):
        checkpoint_path("../../etc-step_1")


def test_the_shipped_manifest_is_what_the_cli_writes():
    cli = [str(Path(sys.executable).parent / "lm-assets"), "vllm-manifest", "--checkpoint", "dpo-step_00000030",
           "--draft", "main-step_00000010", "--tensor-parallel", "2"]  # fmt: skip
    written = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    assert written == (REPO / "deploy" / "vllm.yaml").read_text()
    deployment, service = yaml.safe_load_all(written)
    as_kubernetes(deployment, "V1Deployment")
    as_kubernetes(service, "V1Service")
    assert written == manifests_yaml(VllmSpec(name="lm-assets-vllm", model="/models/dpo/step_00000030/hf",
                                              draft="/models/main/step_00000010/hf", tensor_parallel=2,
                                              served_name="dpo-step_00000030"))  # fmt: skip


def test_the_schema_check_refuses_a_broken_object():
    broken = vllm_manifests(VllmSpec(name="lm", model="/models/a/hf"))["deployment"]
    del broken["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        as_kubernetes(broken, "V1Deployment")
