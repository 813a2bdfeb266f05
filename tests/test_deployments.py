"""Deployments and replicas: the `deployments` setting, GPU names, learning replicas from real
scraped text and spans, config over learned values, incremental learning, the demo's config.

Scrapes are stored through Scraper.ingest_text and spans through the OTLP decoder and
insert_spans — the same paths a live scrape and /v1/traces take — into real DuckDB files.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from inferledger.core.errors import BadInputError, InferLedgerError, SettingsError
from inferledger.core.settings import ScrapeTarget
from inferledger.core.storage import Storage
from inferledger.fixtures import make_export_request
from inferledger.settings import load_settings
from ingest.scraper import Scraper
from ingest.span_writer import decode_for_storage, insert_spans
from ledger.deployments import learn_replicas, set_idle_policy, sync_configured
from models.deployment_config import (
    Deployment,
    DeploymentConfigError,
    deployments_from_workload,
    gpu_type_name,
    normalize_gpu_model,
    parse_deployments,
)
from models.idle_policy import IdlePolicy
from models.otlp import add_attribute
from models.workload import load_workload

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
STEP = timedelta(seconds=15)
TEXT = "text/plain; version=0.0.4; charset=utf-8"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"

CHAT_0 = ScrapeTarget("vllm-chat-0", "http://10.0.0.5:8000/metrics", 15, 10, "vllm", "chat-prod")
CHAT_1 = ScrapeTarget("vllm-chat-1", "http://10.0.0.6:8000/metrics", 15, 10, "vllm", "chat-prod")
SOLO = ScrapeTarget("vllm-solo", "http://10.0.1.9:8000/metrics", 15, 10, "vllm", None)
DCGM_1 = ScrapeTarget("dcgm-node-1", "http://10.0.0.5:9400/metrics", 15, 10, "dcgm", "chat-prod")
DCGM_2 = ScrapeTarget("dcgm-node-2", "http://10.0.1.9:9400/metrics", 15, 10, "dcgm", None)


# ---------------------------------------------------------------- pages, as the exporters write
def vllm_page(model: str, num_gpu_blocks: int, *, block_size: int = 16, prefix: bool = True) -> str:
    """A vLLM /metrics page (classic text format, prometheus_client's layout): the scheduler
    gauges carry model_name; cache_config_info carries every CacheConfig field as a label."""
    series = f'engine="0",model_name="{model}"'
    cache_labels = {
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(prefix),
        "engine": "0",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "0",
        "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }
    labels = ",".join(f'{k}="{v}"' for k, v in cache_labels.items())
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{series}}} 3.0\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{series}}} 0.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{series}}} 0.25\n"
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{series}}} 12345.0\n"
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f"vllm:cache_config_info{{{labels}}} 1.0\n"
    )


def dcgm_page(model_name: str, hostname: str, gpus: int, host_label: str = "Hostname") -> str:
    """A dcgm-exporter page: every sample carries gpu, UUID, pci_bus_id, device, modelName and
    Hostname (../shared/reference/vllm-observability.md 5a); newer releases spell it
    `hostname` (host_label)."""
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for i in range(gpus):
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{hostname}-{i}",'
            f'pci_bus_id="00000000:{18 + i:02X}:00.0",device="nvidia{i}",'
            f'modelName="{model_name}",{host_label}="{hostname}"}} 87'
        )
    lines += [
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
    ]
    for i in range(gpus):
        lines.append(
            f'DCGM_FI_DEV_FB_USED{{gpu="{i}",UUID="GPU-{hostname}-{i}",'
            f'pci_bus_id="00000000:{18 + i:02X}:00.0",device="nvidia{i}",'
            f'modelName="{model_name}",{host_label}="{hostname}"}} 70000'
        )
    return "\n".join(lines) + "\n"


def scrape(scraper: Scraper, target: ScrapeTarget, text: str, ts: datetime) -> None:
    result = scraper.ingest_text(target, text, TEXT, ts)
    assert result.up, result.error


def engine_spans(storage: Storage, replica: str, host: str, start: datetime, n: int = 3) -> None:
    """vLLM llm_request spans from `replica` on `host`, stored through the OTLP ingest path."""
    start_ns = int(start.timestamp()) * 1_000_000_000
    req = make_export_request(n, seed=hash(replica) % 1000, service="vllm", start_ns=start_ns)
    attrs = req.resource_spans[0].resource.attributes
    add_attribute(attrs, "service.instance.id", replica)
    add_attribute(attrs, "host.name", host)
    decoded = decode_for_storage(req.SerializeToString())
    assert storage.write(lambda cur: insert_spans(cur, decoded)) == n


@pytest.fixture
def scraper(storage: Storage) -> Scraper:
    return Scraper(storage, None, max_bytes=1 << 20)


@pytest.fixture
def fleet(storage: Storage, scraper: Scraper) -> Storage:
    """Two replicas of chat-prod on an H100 node (no spans: GPU type by deployment), and one
    replica with no deployment whose spans put it on an L40S node (GPU type by host)."""
    for i in range(3):
        ts = T0 + i * STEP
        scrape(scraper, CHAT_0, vllm_page(LLAMA_70B, 20_000), ts)
        scrape(scraper, CHAT_1, vllm_page(LLAMA_70B, 20_000), ts)
        scrape(scraper, SOLO, vllm_page(LLAMA_8B, 9_000, block_size=32, prefix=False), ts)
        scrape(scraper, DCGM_1, dcgm_page("NVIDIA H100 80GB HBM3", "gpu-node-1", 8), ts)
        scrape(scraper, DCGM_2, dcgm_page("NVIDIA L40S", "gpu-node-2", 2), ts)
    engine_spans(storage, "vllm-solo", "gpu-node-2", T0)
    return storage


def replicas_view(storage: Storage) -> dict[str, dict[str, Any]]:
    df = storage.query("select * from deployment_replicas order by replica")
    return {row["replica"]: row for row in df.iter_rows(named=True)}


def deployment_rows(storage: Storage) -> dict[str, tuple[Any, ...]]:
    rows = storage.fetchall(
        "select deployment, source, idle_policy, model, gpu_type, gpus_per_replica, "
        "tensor_parallel, environment from deployments order by deployment"
    )
    return {r[0]: r[1:] for r in rows}


# ---------------------------------------------------------------- the setting
def test_setting_from_yaml_config_file_and_json_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "deployments:\n"
        "  - name: chat-prod\n"
        "    model: meta-llama/Llama-3.1-70B-Instruct\n"
        "    gpu_type: NVIDIA H200\n"
        "    gpus_per_replica: 4\n"
        "    tensor_parallel: 2\n"
        "    idle_policy: Usage\n"
        "    environment: prod\n"
        "  - {name: batch, gpu_type: h100}\n"
    )
    chat, batch = load_settings(cfg, env={})["deployments"]
    assert chat == Deployment("chat-prod", LLAMA_70B, "H200", 4, 2, IdlePolicy.USAGE, "prod")
    assert chat.gpus == 4
    assert batch == Deployment("batch", gpu_type="H100-SXM")
    assert batch.gpus == 1

    env = {"INFERLEDGER_DEPLOYMENTS": json.dumps([{"name": "x", "tensor_parallel": 8}])}
    (x,) = load_settings(env=env)["deployments"]
    assert (x.name, x.tensor_parallel, x.gpus, x.idle_policy) == ("x", 8, 8, None)
    assert load_settings(env={})["deployments"] == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "a"}, "expected a list of deployments, got dict"),
        (["a"], "deployment #1: expected a mapping with a name, got 'a'"),
        ([{"model": "m"}], "deployment #1: name is required (a non-empty text)"),
        ([{"name": " a"}], "deployment #1: name ' a' has leading or trailing spaces"),
        (
            [{"name": "a"}, {"name": "b", "gpu": "h200"}],
            "deployment #2 (b): unknown field(s) gpu (known: name, model, gpu_type, "
            "gpus_per_replica, tensor_parallel, idle_policy, environment)",
        ),
        (
            [{"name": "a", "gpu_type": "X100"}],
            "deployment #1 (a): gpu_type 'X100' is not a known GPU "
            "(known: A100-40GB, A100-80GB, H100-SXM, H200, L40S, B200)",
        ),
        (
            [{"name": "a", "gpus_per_replica": 0}],
            "deployment #1 (a): gpus_per_replica must be from 1 to 65536, got 0",
        ),
        (
            [{"name": "a", "tensor_parallel": "2"}],
            "deployment #1 (a): tensor_parallel must be a whole number, got '2'",
        ),
        (
            [{"name": "a", "tensor_parallel": True}],
            "deployment #1 (a): tensor_parallel must be a whole number, got True",
        ),
        (
            [{"name": "a", "tensor_parallel": 2.5}],
            "deployment #1 (a): tensor_parallel must be a whole number, got 2.5",
        ),
        (
            [{"name": "a", "gpus_per_replica": 3, "tensor_parallel": 2}],
            "deployment #1 (a): gpus_per_replica (3) must be a multiple of tensor_parallel (2)",
        ),
        (
            [{"name": "a", "idle_policy": "configured"}],
            "deployment #1 (a): idle_policy must be one of separate, usage, even, got 'configured'",
        ),
        ([{"name": "a", "model": ""}], "deployment #1 (a): model must be a non-empty text"),
        ([{"name": "a", "environment": 3}], "environment must be a non-empty text, got 3"),
        ([{"name": "a"}, {"name": "a"}], "deployment name 'a' is used twice"),
        ('[{"name": "a",]', "expected a JSON list of deployments: Expecting property name"),
    ],
)
def test_parse_errors_are_one_line_naming_entry_and_field(raw: Any, message: str) -> None:
    with pytest.raises(DeploymentConfigError) as caught:
        parse_deployments(raw)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert isinstance(caught.value, InferLedgerError)


def test_bad_setting_names_its_source(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("deployments:\n  - {name: chat, gpu_type: H300}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(cfg, env={})
    assert str(caught.value) == (
        f"setting 'deployments' (from config file {cfg}): deployment #1 (chat): gpu_type "
        "'H300' is not a known GPU (known: A100-40GB, A100-80GB, H100-SXM, H200, L40S, B200)"
    )


# ---------------------------------------------------------------- GPU names
@pytest.mark.parametrize(
    ("dcgm_model_name", "gpu_type"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA B200", "B200"),
        # Other cards (different memory, bandwidth, price): unknown, to be configured.
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA H100 PCIe", None),
        ("Tesla T4", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_gpu_model(dcgm_model_name: str | None, gpu_type: str | None) -> None:
    assert normalize_gpu_model(dcgm_model_name) == gpu_type


@pytest.mark.parametrize("spelling", ["H200", "h200", "NVIDIA H200", "h200_141gb", "H200-SXM"])
def test_config_accepts_common_gpu_spellings(spelling: str) -> None:
    assert gpu_type_name(spelling) == "H200"
    (d,) = parse_deployments([{"name": "a", "gpu_type": spelling}])
    assert d.gpu_type == "H200"


# ---------------------------------------------------------------- learning
def test_learns_replicas_from_scrapes_dcgm_and_spans(fleet: Storage) -> None:
    assert learn_replicas(fleet) == 3
    view = replicas_view(fleet)
    assert sorted(view) == ["vllm-chat-0", "vllm-chat-1", "vllm-solo"]

    chat = view["vllm-chat-0"]
    assert (chat["deployment"], chat["deployment_source"]) == ("chat-prod", "learned")
    assert (chat["model"], chat["model_source"]) == (LLAMA_70B, "learned")
    # No spans from it: the GPU type is that of the DCGM exporter of its deployment.
    assert (chat["gpu_type"], chat["gpu_type_source"]) == ("H100-SXM", "learned")
    assert chat["dcgm_model_name"] == "NVIDIA H100 80GB HBM3"
    assert (chat["num_gpu_blocks"], chat["block_size"], chat["kv_cache_tokens"]) == (
        20_000,
        16,
        320_000,
    )
    assert (chat["cache_dtype"], chat["prefix_caching"]) == ("auto", True)
    assert (chat["gpus"], chat["gpus_source"]) == (1, "default")
    assert (chat["tensor_parallel"], chat["tensor_parallel_source"]) == (1, "default")
    assert (chat["idle_policy"], chat["idle_policy_source"]) == ("separate", "default")
    assert chat["first_seen"] == T0 and chat["last_seen"] == T0 + 2 * STEP
    assert chat["host"] is None

    solo = view["vllm-solo"]
    # No deployment on its target: a deployment of its own name.
    assert (solo["deployment"], solo["deployment_source"]) == ("vllm-solo", "default")
    assert solo["model"] == LLAMA_8B
    # Its engine spans say host.name gpu-node-2, whose DCGM exporter reports an L40S.
    assert (solo["host"], solo["gpu_type"], solo["dcgm_model_name"]) == (
        "gpu-node-2",
        "L40S",
        "NVIDIA L40S",
    )
    assert (solo["num_gpu_blocks"], solo["block_size"], solo["prefix_caching"]) == (
        9_000,
        32,
        False,
    )
    # Every replica's deployment is listed, discovered, so the UI can set its policy.
    assert deployment_rows(fleet) == {
        "chat-prod": ("discovered", "separate", None, None, None, None, None),
        "vllm-solo": ("discovered", "separate", None, None, None, None, None),
    }
    # Learning again from the same data changes nothing.
    before = fleet.fetchall("select * exclude (learned_at) from replicas order by replica")
    assert learn_replicas(fleet) == 3
    assert fleet.fetchall("select * exclude (learned_at) from replicas order by replica") == before


def test_newer_dcgm_exporters_lower_case_hostname_label_is_read(
    storage: Storage, scraper: Scraper
) -> None:
    """dcgm-exporter d5e5f51 renamed the `Hostname` label `hostname`: a replica's GPU type is
    still learned through its host."""
    scrape(scraper, SOLO, vllm_page(LLAMA_8B, 9_000), T0)
    scrape(scraper, DCGM_2, dcgm_page("NVIDIA L40S", "gpu-node-2", 2, host_label="hostname"), T0)
    engine_spans(storage, "vllm-solo", "gpu-node-2", T0)
    assert learn_replicas(storage) == 1
    solo = replicas_view(storage)["vllm-solo"]
    assert (solo["host"], solo["gpu_type"], solo["dcgm_model_name"]) == (
        "gpu-node-2",
        "L40S",
        "NVIDIA L40S",
    )


def test_config_wins_over_learned_values(fleet: Storage) -> None:
    learn_replicas(fleet)
    sync_configured(
        fleet,
        parse_deployments(
            [
                {
                    "name": "chat-prod",
                    "gpu_type": "NVIDIA H200",  # DCGM says H100: the config wins
                    "tensor_parallel": 2,
                    "idle_policy": "usage",
                    "environment": "prod",
                }
            ]
        ),
    )
    view = replicas_view(fleet)
    chat = view["vllm-chat-1"]
    assert (chat["gpu_type"], chat["gpu_type_source"]) == ("H200", "config")
    assert chat["dcgm_model_name"] == "NVIDIA H100 80GB HBM3"  # what DCGM said, still visible
    assert (chat["model"], chat["model_source"]) == (LLAMA_70B, "learned")  # a gap config left
    # tensor_parallel alone: the replica holds that many GPUs.
    assert (chat["gpus"], chat["gpus_source"]) == (2, "config")
    assert (chat["tensor_parallel"], chat["tensor_parallel_source"]) == (2, "config")
    assert (chat["idle_policy"], chat["idle_policy_source"]) == ("usage", "config")
    assert (chat["environment"], chat["environment_source"]) == ("prod", "config")
    assert chat["num_gpu_blocks"] == 20_000
    # The replica of another deployment is untouched.
    assert view["vllm-solo"]["gpu_type"] == "L40S"
    assert view["vllm-solo"]["gpus_source"] == "default"
    assert deployment_rows(fleet)["chat-prod"] == (
        "config",
        "usage",
        None,
        "H200",
        None,
        2,
        "prod",
    )


def test_sync_removes_only_config_rows_and_keeps_ui_policy(storage: Storage) -> None:
    sync_configured(
        storage,
        [Deployment("a", gpu_type="H200"), Deployment("b", idle_policy=IdlePolicy.EVEN)],
    )
    set_idle_policy(storage, "c", "usage")  # a deployment no config names: the UI's row
    set_idle_policy(storage, "a", IdlePolicy.EVEN)  # the config sets no policy for a
    set_idle_policy(storage, "b", "separate")  # the config's explicit policy wins at restart
    sync_configured(
        storage, [Deployment("a", gpu_type="H200"), Deployment("b", idle_policy=IdlePolicy.EVEN)]
    )
    rows = deployment_rows(storage)
    assert {k: v[:2] for k, v in rows.items()} == {
        "a": ("config", "even"),
        "b": ("config", "even"),
        "c": ("ui", "usage"),
    }
    # Dropping a and b from the config deletes their rows; the UI's row stays.
    sync_configured(storage, [])
    assert {k: v[:2] for k, v in deployment_rows(storage).items()} == {"c": ("ui", "usage")}


def test_sync_keeps_updated_at_of_unchanged_rows(storage: Storage) -> None:
    def stamps() -> dict[str, datetime]:
        return dict(storage.fetchall("select deployment, updated_at from deployments"))

    config = [Deployment("a", gpu_type="H200"), Deployment("b", tensor_parallel=2)]
    sync_configured(storage, config)
    before = stamps()
    time.sleep(0.01)
    sync_configured(storage, config)
    assert stamps() == before  # nothing changed: nothing rewritten
    sync_configured(storage, [config[0], Deployment("b", tensor_parallel=4)])
    after = stamps()
    assert after["a"] == before["a"] and after["b"] > before["b"]
    assert deployment_rows(storage)["b"][5] == 4
    time.sleep(0.01)
    set_idle_policy(storage, "a", "usage")  # the UI's change stamps the row, keeps its owner
    assert stamps()["a"] > after["a"]
    assert deployment_rows(storage)["a"][:2] == ("config", "usage")


def test_removed_config_deployment_with_replicas_comes_back_discovered(fleet: Storage) -> None:
    learn_replicas(fleet)
    sync_configured(fleet, [Deployment("chat-prod", gpu_type="H200")])
    assert deployment_rows(fleet)["chat-prod"][0] == "config"
    sync_configured(fleet, [])
    assert deployment_rows(fleet)["chat-prod"][:4] == ("discovered", "separate", None, None)
    assert replicas_view(fleet)["vllm-chat-0"]["gpu_type"] == "H100-SXM"  # learned again
    # The UI takes a discovered row over.
    set_idle_policy(fleet, "chat-prod", "even")
    assert deployment_rows(fleet)["chat-prod"][:2] == ("ui", "even")
    view = replicas_view(fleet)["vllm-chat-0"]
    assert (view["idle_policy"], view["idle_policy_source"]) == ("even", "ui")


@pytest.mark.parametrize(
    ("deployment", "policy", "message"),
    [
        ("a", "configured", "idle policy of a must be one of separate, usage, even"),
        ("a", "", "idle policy of a must be one of separate, usage, even, got ''"),
        ("", "usage", "deployment must be a non-empty name"),
    ],
)
def test_set_idle_policy_rejects_bad_input(
    storage: Storage, deployment: str, policy: str, message: str
) -> None:
    with pytest.raises(BadInputError, match=message):
        set_idle_policy(storage, deployment, policy)
    assert storage.scalar("select count(*) from deployments") == 0


def test_incremental_learning_picks_up_a_new_replica(fleet: Storage, scraper: Scraper) -> None:
    assert learn_replicas(fleet) == 3
    first = {r[0]: r[1] for r in fleet.fetchall("select replica, learned_at from replicas")}
    later = T0 + timedelta(hours=1)
    new = ScrapeTarget("vllm-chat-2", "http://10.0.0.7:8000/metrics", 15, 10, "vllm", "chat-prod")
    scrape(scraper, new, vllm_page(LLAMA_70B, 21_000), later)
    # chat-0 restarted with more KV cache blocks (a new gpu_memory_utilization, say).
    scrape(scraper, CHAT_0, vllm_page(LLAMA_70B, 25_000), later)
    scrape(scraper, DCGM_1, dcgm_page("NVIDIA H100 80GB HBM3", "gpu-node-1", 8), later)

    assert learn_replicas(fleet, since=later) == 2  # only what the window holds
    view = replicas_view(fleet)
    assert sorted(view) == ["vllm-chat-0", "vllm-chat-1", "vllm-chat-2", "vllm-solo"]
    added = view["vllm-chat-2"]
    assert (added["deployment"], added["model"], added["gpu_type"]) == (
        "chat-prod",
        LLAMA_70B,
        "H100-SXM",
    )
    assert added["first_seen"] == later == added["last_seen"]
    chat0 = view["vllm-chat-0"]
    assert chat0["num_gpu_blocks"] == 25_000
    assert (chat0["first_seen"], chat0["last_seen"]) == (T0, later)  # the seen span widens
    # Replicas outside the window are not rewritten: their stored facts stay as they were.
    assert view["vllm-solo"]["host"] == "gpu-node-2"
    assert view["vllm-solo"]["learned_at"] == first["vllm-solo"]
    assert view["vllm-chat-1"]["last_seen"] == T0 + 2 * STEP

    # A window with no vLLM scrape learns nothing and writes nothing.
    assert learn_replicas(fleet, since=later + timedelta(hours=1)) == 0


def test_window_without_cache_config_keeps_stored_values(
    storage: Storage, scraper: Scraper
) -> None:
    scrape(scraper, CHAT_0, vllm_page(LLAMA_70B, 20_000), T0)
    learn_replicas(storage)
    later = T0 + timedelta(minutes=5)
    # A scrape whose page lacks cache_config_info and model_name (say, a trimmed page).
    bare = "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total 0\n"
    scrape(scraper, CHAT_0, bare, later)
    assert learn_replicas(storage, since=later) == 1
    row = replicas_view(storage)["vllm-chat-0"]
    assert (row["num_gpu_blocks"], row["model"], row["last_seen"]) == (20_000, LLAMA_70B, later)


def test_since_must_be_timezone_aware(storage: Storage) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        learn_replicas(storage, since=datetime(2026, 1, 1))


# ---------------------------------------------------------------- the demo and the service
def test_demo_workload_deployments_are_configured(storage: Storage) -> None:
    config = load_workload()
    deployments = deployments_from_workload(config)
    assert deployments == (
        Deployment(
            "llama-3.1-8b-h200",
            model=LLAMA_8B,
            gpu_type="H200",
            gpus_per_replica=1,
            tensor_parallel=1,
            environment="prod",
        ),
        Deployment(
            "llama-3.1-70b-fp8-h200",
            model=LLAMA_70B,
            gpu_type="H200",
            gpus_per_replica=1,
            tensor_parallel=1,
            environment="prod",
        ),
        # the nightly extraction batch's own pool, mostly idle (docs/demo.md, "What the demo
        # plants")
        Deployment(
            "llama-3.1-8b-batch-h200",
            model=LLAMA_8B,
            gpu_type="H200",
            gpus_per_replica=1,
            tensor_parallel=1,
            environment="prod",
        ),
    )
    # The demo passes them through the setting (Settings.replace validates them again).
    settings = load_settings(env={}).replace(deployments=deployments)
    assert settings["deployments"] == deployments
    sync_configured(storage, settings["deployments"])
    rows = deployment_rows(storage)
    assert rows["llama-3.1-8b-h200"] == ("config", "separate", LLAMA_8B, "H200", 1, 1, "prod")
    assert rows["llama-3.1-70b-fp8-h200"][:4] == ("config", "separate", LLAMA_70B, "H200")


def test_service_start_syncs_configured_deployments(live_factory) -> None:
    live = live_factory(
        deployments=[{"name": "chat-prod", "gpu_type": "h200", "tensor_parallel": 2}]
    )
    assert live.storage.fetchall(
        "select deployment, gpu_type, tensor_parallel, source from deployments"
    ) == [("chat-prod", "H200", 2, "config")]


# ------------------------------------------------------------------------------ SLO targets
def test_slo_targets_are_edited_by_name_and_validated(storage: Storage) -> None:
    from ledger import slo_targets
    from ledger.efficiency import (
        SloTargetsError,
        bundled_slo_targets_file,
        load_slo_targets,
        seed_slo_targets_if_empty,
    )

    seeded = seed_slo_targets_if_empty(storage)
    assert seeded == len(load_slo_targets(bundled_slo_targets_file()))
    listed = {t.objective: t for t in slo_targets.list_slo_targets(storage)}
    answer = listed["answer-ttft-p95"]
    assert answer.describe() == "/answer ttft p95 ≤ 0.5 s"
    assert (answer.source, answer.versions) == ("config", 1)
    # change: the latest version in place, now owned by the UI
    what = slo_targets.save_slo_target(
        storage, objective="answer-ttft-p95", route="/answer", stage="ttft", percentile=99,
        target_s="0.8", note="looser", changed_by="ann",
    )  # fmt: skip
    assert what == "changed"
    row = storage.fetchall(
        "select percentile, target_s, note, source from slo_targets "
        "where objective = 'answer-ttft-p95'"
    )
    assert row == [(0.99, 0.8, "looser", "ui")]
    # add: a route with a target already, a LIKE pattern, or a confirmed new route
    assert slo_targets.save_slo_target(
        storage, objective="summarize-ttft-p90", route="/summarize", stage="ttft",
        percentile=90, target_s=1, changed_by="ann",
    ) == "added"  # fmt: skip
    assert slo_targets.save_slo_target(
        storage, objective="new-e2e", route="/translate", stage="e2e", percentile=50,
        target_s=3, new_route=True, changed_by="ann",
    ) == "added"  # fmt: skip
    listed = {t.objective: t for t in slo_targets.list_slo_targets(storage)}
    assert listed["new-e2e"].describe() == "/translate e2e p50 ≤ 3 s"
    assert listed["answer-ttft-p95"].describe() == "/answer ttft p99 ≤ 0.8 s"
    before = storage.fetchall("select * from slo_targets order by target_id")
    for fields, message in [
        ({"route": "/nope"}, "route /nope has no traffic or target yet; check the name"),
        ({"percentile": 0}, r"percentile must be in \(0, 100\] \(95 for p95\), got 0"),
        ({"percentile": 101}, r"percentile must be in \(0, 100\]"),
        ({"percentile": None}, "percentile must be a number"),
        ({"target_s": 0}, "target_s must be a positive number of seconds, got 0"),
        ({"target_s": -1}, "target_s must be a positive number"),
        ({"stage": "think"}, "stage must be one of queue, retrieval"),
        ({"objective": " "}, "objective must not be empty"),
        ({"route": "answer", "new_route": True}, "a route starts with '/'"),
    ]:
        args: dict[str, Any] = {
            "objective": "x", "route": "/answer", "stage": "e2e", "percentile": 95,
            "target_s": 1, "changed_by": "ann",
        } | fields  # fmt: skip
        with pytest.raises(SloTargetsError, match=message):
            slo_targets.save_slo_target(storage, **args)
    assert storage.fetchall("select * from slo_targets order by target_id") == before
    assert slo_targets.remove_slo_target(storage, "new-e2e", changed_by="ann") == 1
    with pytest.raises(SloTargetsError, match="no SLO target named 'new-e2e'"):
        slo_targets.remove_slo_target(storage, "new-e2e", changed_by="ann")
    assert "new-e2e" not in {t.objective for t in slo_targets.list_slo_targets(storage)}
    # the seed file fills an empty table only: an edited table is not re-seeded
    assert seed_slo_targets_if_empty(storage) == 0
