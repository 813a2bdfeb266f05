"""docker-compose.yml: structure, pinned images, and every referenced config file exists and
parses (no Docker engine runs on CI, so the stack itself is exercised through the simulator)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from inferledger.settings import load_config_file, load_settings

ROOT = Path(__file__).resolve().parent.parent


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def services_in(profile: str) -> set[str]:
    return {
        name
        for name, svc in compose()["services"].items()
        if not svc.get("profiles") or profile in svc["profiles"]
    }


def test_profiles_make_two_complete_stacks() -> None:
    assert services_in("gpu") == {"otel-collector", "vllm", "dcgm-exporter", "inferledger-gpu"}
    assert services_in("cpu") == {"otel-collector", "simulator", "inferledger-cpu"}
    for profile in ("gpu", "cpu"):
        names = services_in(profile)
        for name in names:
            for dep in compose()["services"][name].get("depends_on", []):
                assert dep in names, f"{name} depends on {dep}, absent in profile {profile}"


def test_images_are_pinned_and_builds_exist() -> None:
    for name, svc in compose()["services"].items():
        image = svc.get("image", "")
        assert image and ":" in image and not image.endswith(":latest"), name
        build = svc.get("build")
        if build:
            context = ROOT / (build if isinstance(build, str) else build["context"])
            dockerfile = "Dockerfile" if isinstance(build, str) else build["dockerfile"]
            assert (context / dockerfile).is_file(), f"{name}: missing {dockerfile}"
    vllm_image = (ROOT / "deploy" / "vllm.Dockerfile").read_text()
    assert re.search(r"^FROM vllm/vllm-openai:v\d", vllm_image, re.M)
    assert "opentelemetry-exporter-otlp-proto-http==" in vllm_image


def test_vllm_sends_otlp_http_to_the_collector_and_caches_prefixes() -> None:
    vllm = compose()["services"]["vllm"]
    assert "--enable-prefix-caching" in vllm["command"]
    assert "--otlp-traces-endpoint=http://otel-collector:4318/v1/traces" in vllm["command"]
    assert vllm["environment"]["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]


def test_collector_config_parses_and_exports_to_inferledger() -> None:
    svc = compose()["services"]["otel-collector"]
    host_path = svc["volumes"][0].split(":")[0]
    cfg = yaml.safe_load((ROOT / host_path).read_text())
    pipeline = cfg["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    for component in pipeline["processors"]:
        assert component in cfg["processors"]
    for component in pipeline["exporters"]:
        assert component in cfg["exporters"]
    exporter = cfg["exporters"][pipeline["exporters"][0]]
    assert exporter["endpoint"] == "http://inferledger:8050"
    assert exporter["encoding"] == "proto"


def test_inferledger_configs_are_valid_settings() -> None:
    configs = compose()["configs"]
    for name in ("inferledger-gpu", "inferledger-cpu"):
        path = ROOT / configs[name]["file"]
        load_config_file(path)  # unknown keys would raise
        settings = load_settings(path, env={})
        targets = settings["scrape.targets"]
        assert {t.kind for t in targets} == {"vllm", "dcgm"}
        hosts = {re.match(r"http://([^:/]+)", t.url).group(1) for t in targets}
        service_names = set(compose()["services"])
        assert hosts <= service_names, f"{name} scrapes hosts that are not services: {hosts}"


def test_simulator_command_is_a_valid_cli_invocation() -> None:
    from inferledger.cli import build_parser

    args = build_parser().parse_args(compose()["services"]["simulator"]["command"])
    assert args.command == "simulate" and args.serve
    assert (args.port, args.dcgm_port, int(args.replicas)) == (8000, 9400, 4)
    cpu_targets = load_settings(ROOT / "deploy" / "inferledger-cpu.yaml", env={})["scrape.targets"]
    ports = sorted(int(t.url.rsplit(":", 1)[1].split("/")[0]) for t in cpu_targets)
    # replica i serves its own /metrics on port + 1 + i (docs/sim-server.md)
    assert ports == [8001, 8002, 8003, 8004, 9400]
