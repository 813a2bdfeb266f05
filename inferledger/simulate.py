"""`inferledger simulate`: `vllm bench serve` against the simulator.

The flags are those of `vllm serve` (the deployment) and `vllm bench serve` (the traffic), so a
simulated run and a real one compare with one command line; `--scenario FILE` reads the same
fields from YAML, plus a traffic mix, and flags given on the command line override the file.
`--trace FILE` replays a JSONL trace (`inferledger trace export` writes one from the ledger),
`--dataset-name sharegpt` draws ShareGPT-like lengths; `--client-delay-ms` and `--warmup-s` /
`--cooldown-s` measure as a client over a steady window (docs/simulator.md, Workloads).
The output is `vllm bench serve`'s result block, and `--save-result` writes its result JSON plus
what the simulator knows (KV-cache occupancy, preemptions, prefix-cache hits) and the whole
config, so the numbers trace to their inputs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from inferledger.core.errors import BadInputError
from inferledger.sim_server import (
    add_serve_arguments,
    serve_options_from_scenario,
    serve_simulation,
)
from models.serving.scenario import SCENARIO_FIELDS, ScenarioConfig, load_scenario, parse_field
from models.serving.scenario_run import ScenarioRun, run_scenario, summarize_run
from models.serving.summary import METRICS, format_benchmark_result, preemption_warning

BACKEND = "inferledger-sim"
DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl"
DEFAULT_METRIC_PERCENTILES = "99"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `simulate` command to the CLI's subparsers."""
    parser = subparsers.add_parser(
        "simulate",
        help="run `vllm bench serve` against the simulated deployment",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    for spec in SCENARIO_FIELDS:
        if spec.kind == "bool":
            # --enable-prefix-caching / --no-enable-prefix-caching, as vLLM spells them
            parser.add_argument(
                _flag(spec.name),
                dest=spec.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{spec.help} [default: on]",
            )
            continue
        default = spec.shown_default if spec.default is None else spec.default
        parser.add_argument(
            _flag(spec.name),
            dest=spec.name,
            metavar=spec.name.upper() if not spec.choices else "{" + ",".join(spec.choices) + "}",
            default=None,  # values are parsed in run(), so a bad one is one line, not usage
            help=f"{spec.help} [default: {default}]",
        )
    parser.add_argument("--scenario", metavar="FILE", help="scenario YAML (fields as the flags)")
    parser.add_argument(
        "--save-result", metavar="FILE", help="write the result JSON (vllm bench serve's keys)"
    )
    parser.add_argument(
        "--percentile-metrics",
        default=DEFAULT_PERCENTILE_METRICS,
        help=f"comma-separated metrics to report: ttft,tpot,itl,e2el "
        f"[default: {DEFAULT_PERCENTILE_METRICS}]",
    )
    parser.add_argument(
        "--metric-percentiles",
        default=DEFAULT_METRIC_PERCENTILES,
        help=f"comma-separated percentiles, e.g. 25,50,99 [default: {DEFAULT_METRIC_PERCENTILES}]",
    )
    add_serve_arguments(parser)
    return parser


def scenario_from_args(args: argparse.Namespace) -> ScenarioConfig:
    """Defaults < the scenario file < the flags given on the command line."""
    base = load_scenario(args.scenario) if args.scenario else ScenarioConfig()
    overrides = {}
    for spec in SCENARIO_FIELDS:
        raw = getattr(args, spec.name, None)
        if raw is None:
            continue
        if spec.kind == "bool":
            overrides[spec.name] = raw
        else:
            overrides[spec.name] = parse_field(spec.name, raw, label=_flag(spec.name))
    ignored = [_flag(k) for k in overrides if k.startswith("random_")]
    if base.mix and ignored:
        raise BadInputError(
            f"{', '.join(ignored)}: the scenario's traffic mix sets the lengths; "
            "change them in its mix"
        )
    try:
        return replace(base, **overrides)
    except BadInputError as exc:
        # Name the flag, not the field, when a flag's value broke a rule.
        message = str(exc)
        for name in overrides:
            if message.startswith(f"{name} "):
                message = _flag(name) + message[len(name) :]
                break
        raise BadInputError(message) from None


def parse_percentile_metrics(text: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    bad = [m for m in names if m not in METRICS]
    if bad or not names:
        raise BadInputError(
            f"--percentile-metrics takes a comma-separated list of {','.join(METRICS)}, "
            f"got {text!r}"
        )
    return names


def parse_metric_percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0 < p <= 100 for p in values):
        raise BadInputError(
            f"--metric-percentiles takes comma-separated numbers in (0, 100], got {text!r}"
        )
    return values


def result_json(
    run: ScenarioRun,
    summary: dict[str, Any],
    *,
    date: str,
) -> dict[str, Any]:
    """`vllm bench serve`'s result keys, the simulator's own, and the full config."""
    scenario = run.scenario
    rate = scenario.request_rate
    out: dict[str, Any] = {
        "date": date,
        "endpoint_type": BACKEND,
        "backend": BACKEND,
        "label": None,
        "model_id": scenario.model,
        "tokenizer_id": scenario.model,
        "num_prompts": len(run.result.requests),
        "dataset_name": "trace" if scenario.trace else scenario.dataset_name,
        "request_rate": "inf" if math.isinf(rate) else rate,
        "burstiness": scenario.burstiness,
        "max_concurrency": scenario.max_concurrency,
    }
    out.update(summary)
    out["config"] = run.config_dict()
    return out


def run(args: argparse.Namespace) -> int:
    """Run the simulation the flags describe; print the result block. Errors the user can fix
    raise BadInputError (the CLI prints one line and exits 2)."""
    if args.serve:
        return serve_simulation(serve_options_from_scenario(args, scenario_from_args(args)))
    metrics = parse_percentile_metrics(args.percentile_metrics)
    percentiles = parse_metric_percentiles(args.metric_percentiles)
    scenario = scenario_from_args(args)
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    save = Path(args.save_result) if args.save_result else None
    if save is not None and not save.parent.is_dir():
        raise BadInputError(f"--save-result: folder {save.parent} does not exist")
    simulated = run_scenario(scenario)
    summary = summarize_run(simulated, percentiles=percentiles)
    warning = preemption_warning(
        summary["num_preemptions"], len(simulated.result.requests), simulated.engine.kv_cache_tokens
    )
    if warning is not None:
        summary["warnings"] = [warning]
        print(warning, file=sys.stderr, flush=True)
    print(
        format_benchmark_result(
            summary,
            percentile_metrics=metrics,
            percentiles=percentiles,
            max_concurrency=scenario.max_concurrency,
            request_rate=scenario.request_rate,
        ),
        flush=True,
    )
    if save is not None:
        text = json.dumps(result_json(simulated, summary, date=date), indent=2, allow_nan=False)
        try:
            save.write_text(text + "\n", "utf-8")
        except OSError as exc:
            raise BadInputError(f"--save-result {save}: {exc.strerror or exc}") from None
    return 0
