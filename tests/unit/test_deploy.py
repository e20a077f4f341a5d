"""deploy/ as a platform team applies it: the Kubernetes manifests pass the real schemas
(kubernetes-validate's JSON schemas of the Kubernetes API, strict: no unknown field; the
ServiceMonitor through the prometheus-operator CRD models of cloudcoil, round-tripped so an
unknown field fails too), and the pieces fit each other and the program: selectors match
labels, named ports exist, the probes are the paths the exporter answers, and the container's
arguments are ones ``skewscope watch`` accepts. The live side (the same arguments run against a
real Prometheus, probed, stopped by SIGTERM) is tests/live/test_deploy_live.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.prometheus_operator import v1 as promop

from skewscope.cli import build_parser
from skewscope.monitor.exporter import PROBES, parse_listen

DEPLOY = Path(__file__).parents[1].parent / "deploy"
K8S = DEPLOY / "kubernetes"
KUBERNETES_VERSION = "1.30"


def manifest(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((K8S / name).read_text())
    assert isinstance(doc, dict)
    return doc


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", ["deployment.yaml", "service.yaml"])
def test_core_manifests_pass_the_kubernetes_schema(name: str) -> None:
    assert kubernetes_validate.validate(manifest(name), KUBERNETES_VERSION, strict=True)


def test_the_schema_check_rejects_an_unknown_field() -> None:
    bad = manifest("deployment.yaml")
    container(bad)["livenessProbes"] = container(bad).pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="livenessProbes"):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def strict_service_monitor(doc: dict[str, Any]) -> None:
    """The CRD model accepts the object and keeps every field of it (a dropped field is one
    the CRD does not know)."""
    model = promop.ServiceMonitor.model_validate(doc)
    assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc


def test_service_monitor_passes_the_operator_crd() -> None:
    strict_service_monitor(manifest("servicemonitor.yaml"))
    typo = manifest("servicemonitor.yaml")
    typo["spec"]["endpoints"][0]["scrapeInterval"] = typo["spec"]["endpoints"][0].pop("interval")
    with pytest.raises(AssertionError):
        strict_service_monitor(typo)


def test_the_pieces_fit_each_other() -> None:
    dep, svc, mon = (
        manifest(n) for n in ("deployment.yaml", "service.yaml", "servicemonitor.yaml")
    )
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert mon["metadata"]["namespace"] in mon["spec"]["namespaceSelector"]["matchNames"]
    assert svc["metadata"]["namespace"] == dep["metadata"]["namespace"]
    c = container(dep)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] in ports
    assert {e["port"] for e in mon["spec"]["endpoints"]} <= {svc_port["name"]}
    assert {c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]} == set(
        PROBES
    )
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {c["livenessProbe"]["httpGet"]["port"], c["readinessProbe"]["httpGet"]["port"]} <= set(
        ports
    )
    args = build_parser("watch").parse_args(["watch", *c["args"]])
    assert parse_listen(args.listen) == ("0.0.0.0", ports["metrics"])
    assert not args.listen.startswith("127.")  # a pod's exporter must be reachable
    state = {m["mountPath"] for m in c["volumeMounts"]}
    history = {e["name"]: e["value"] for e in c["env"]}["SKEWSCOPE_HISTORY"]
    assert args.save and any(history.startswith(m + "/") for m in state)
    sec = dep["spec"]["template"]["spec"]["securityContext"]
    assert sec["runAsNonRoot"] and sec["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"]


def test_kustomization_lists_every_manifest() -> None:
    kust = manifest("kustomization.yaml")
    assert sorted(kust["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def _instructions(text: str) -> dict[str, list[str]]:
    """Containerfile instructions of the final stage by keyword (continuations joined)."""
    joined = text.replace("\\\n", " ")
    stages = joined.split("\nFROM ")
    out: dict[str, list[str]] = {}
    for line in stages[-1].splitlines()[1:]:
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, rest = line.strip().partition(" ")
            out.setdefault(key, []).append(rest.strip())
    return out


def test_containerfile_runs_watch_as_non_root_on_the_manifest_port() -> None:
    ins = _instructions((DEPLOY / "Containerfile").read_text())
    (user,) = ins["USER"]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    assert json.loads(ins["ENTRYPOINT"][0]) == ["skewscope", "watch"]
    cmd = json.loads(ins["CMD"][0])
    args = build_parser("watch").parse_args(["watch", *cmd])
    port = {p["name"]: p["containerPort"] for p in container(manifest("deployment.yaml"))["ports"]}
    assert parse_listen(args.listen)[1] == port["metrics"] == int(ins["EXPOSE"][0])
    env = dict(kv.split("=", 1) for kv in shlex.split(" ".join(ins["ENV"])))
    assert env["SKEWSCOPE_HISTORY"].startswith(json.loads(ins["VOLUME"][0])[0] + "/")
