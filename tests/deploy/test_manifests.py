"""The deployment files under ``deploy/`` hold what Kubernetes and KServe require of them, and
their ``inferd serve`` arguments are ones the real serve parser accepts. No cluster runs here:
the manifests are read as YAML and checked field by field; the Dockerfiles as text."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferd.kernel.actors.repository.remote_storage import is_remote_url
from inferd.kernel.cli.serve import serve_parser
from inferd.kernel.runtime.plugin_manager import Plugins

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PREDICTOR_FORMATS = {"onnx", "pytorch", "tensorrt", "triton"}


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            assert isinstance(document, dict), path
            document["__file__"] = path.name
            found.append(document)
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for document in documents() if document["kind"] == kind]


def serve_arguments(container: dict[str, Any]) -> Any:
    """The container's arguments parsed by ``inferd serve``'s own parser (the image's
    entry point is ``inferd``); argparse exits on a flag it does not know."""
    args = container["args"]
    assert args[0] == "serve", args
    return serve_parser(Plugins.load()).parse_args(args[1:])


def test_every_manifest_names_its_api_kind_and_a_valid_name() -> None:
    kinds = {document["kind"] for document in documents()}
    assert kinds == {"ServingRuntime", "InferenceService", "Deployment", "Service"}
    for document in documents():
        assert document["apiVersion"], document["__file__"]
        assert DNS_LABEL.match(document["metadata"]["name"]), document["metadata"]


def runtime_named(name: str) -> dict[str, Any]:
    (runtime,) = [r for r in of_kind("ServingRuntime") if r["metadata"]["name"] == name]
    return runtime


def test_the_serving_runtime_takes_kserves_tritonserver_arguments() -> None:
    runtime = runtime_named("kserve-inferd")
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert {entry["name"] for entry in spec["supportedModelFormats"]} >= PREDICTOR_FORMATS
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    parsed = serve_arguments(container)
    assert parsed.model_repositories == ["/mnt/models"]  # Triton's --model-store
    assert (parsed.http_port, parsed.grpc_port) == (8080, 9000)
    assert [port["containerPort"] for port in container["ports"]] == [9000]
    assert container["securityContext"]["runAsNonRoot"] is True


def test_the_inference_service_uses_the_runtime() -> None:
    (service,) = of_kind("InferenceService")
    runtime = runtime_named("kserve-inferd")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {entry["name"] for entry in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    assert model["protocolVersion"] == "v2"
    assert model["storageUri"].startswith(("s3://", "gs://", "pvc://"))


def test_the_modelmesh_runtime_is_tritons_adapter_in_front_of_explicit_mode() -> None:
    runtime = runtime_named("inferd-modelmesh")
    spec = runtime["spec"]
    assert spec["multiModel"] is True
    assert spec["protocolVersions"] == ["grpc-v2"]
    adapter = spec["builtInAdapter"]
    (container,) = spec["containers"]
    assert adapter["serverType"] == "triton" == container["name"]  # the adapter's rule
    shell = container["args"][-1]
    assert container["command"] == ["/bin/sh"] and "exec inferd serve" in shell
    parsed = serve_parser(Plugins.load()).parse_args(
        shell.split("exec inferd serve", 1)[1].split())
    assert parsed.model_repositories == ["/models/_triton_models"]
    assert parsed.model_control_mode == "explicit"
    assert not parsed.model_load_on_demand and not parsed.model_memory_budget  # the mesh's
    assert adapter["runtimeManagementPort"] == parsed.grpc_port
    assert spec["grpcDataEndpoint"] == f"port:{parsed.grpc_port}"
    assert container["securityContext"]["runAsNonRoot"] is True


def deployment_files() -> list[str]:
    return [document["__file__"] for document in of_kind("Deployment")]


def test_there_is_a_deployment_from_a_volume_and_one_from_object_storage() -> None:
    assert deployment_files() == ["inferd-s3.yaml", "inferd.yaml"]


@pytest.mark.parametrize("file", deployment_files())
def test_the_deployment_probes_health_and_drains_within_its_grace_period(file: str) -> None:
    (deployment,) = [d for d in of_kind("Deployment") if d["__file__"] == file]
    pod = deployment["spec"]["template"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    parsed = serve_arguments(container)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": parsed.http_port, "grpc": parsed.grpc_port,
                     "metrics": parsed.metrics_port}
    for probe, path in (("readinessProbe", "/v2/health/ready"),
                        ("livenessProbe", "/v2/health/live"), ("startupProbe", "/v2/health/live")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # The pod leaves the endpoints during preStop, then SIGTERM gives in-flight requests
    # --exit-timeout-secs: the grace period must cover both, or the kubelet kills them.
    assert pod["spec"]["terminationGracePeriodSeconds"] > (
        float(pre_stop[1]) + parsed.exit_timeout_secs)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    for root in parsed.model_repositories:
        if is_remote_url(root, Plugins.load().storages()):  # fetched into a cache folder the pod may write
            assert parsed.repository_cache_dir in mounts, root
            assert not mounts[parsed.repository_cache_dir].get("readOnly"), root
        else:  # a mounted volume the server only reads
            assert mounts[root]["readOnly"] is True, root
    if parsed.model_control_state:
        assert parsed.model_control_mode == "explicit"
        assert parsed.model_control_state.startswith("s3://")  # shared by every replica


@pytest.mark.parametrize("file", deployment_files())
def test_the_service_exposes_the_deployments_named_ports(file: str) -> None:
    (deployment,) = [d for d in of_kind("Deployment") if d["__file__"] == file]
    (service,) = [s for s in of_kind("Service") if s["__file__"] == file]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    named = {port["name"] for port in container["ports"]}
    assert {port["targetPort"] for port in service["spec"]["ports"]} == named


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cuda"])
def test_the_images_run_inferd_serve_as_a_user_that_is_not_root(name: str) -> None:
    text = (DEPLOY / name).read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0"), users
    assert 'ENTRYPOINT ["inferd"]' in text
    command = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert command is not None
    serve = yaml.safe_load(command.group(1))  # a JSON array is YAML too
    assert serve_arguments({"args": serve}).model_repositories == ["/models"]
    assert "torch==2.13.0" in text  # pinned, as everywhere
    for port in (8000, 8001, 8002):
        assert str(port) in re.search(r"^EXPOSE (.*)$", text, re.MULTILINE).group(1)
    # onnxruntime and onnxruntime-gpu must never be installed together.
    extras = re.search(r'pip install "\.\[([^\]]*)\]"', text)
    assert extras is not None
    assert not {"onnx", "onnx-gpu"} <= set(extras.group(1).split(","))
