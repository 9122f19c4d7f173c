"""The three studies of the docs' measured results (layer patterns, context extension, real configs), through
the job API of a running service (``make run`` or ``posenc serve``).

Each study is one or more benchmark jobs (3 seeds unless ``--seeds``; the extension studies 2), submitted with
the SDK and waited for; the script prints each job's wall time (created_at to finished_at), its id, the runs that
did not learn their training sizes, per method and size the headline metric's mean +- std over seeds, the
effective lengths, the job's generated summary and, for an extension study, its rules' bands and regime warnings.

    patterns        RoPE everywhere, NoPE everywhere, 3:1 RoPE/NoPE (SmolLM3's pattern), local RoPE + global
                    NoPE (Cohere Command A's: 3 sliding-window RoPE layers, window L/4, : 1 global NoPE layer)
                    and partial rotary 0.25, on a 4-layer d=64 model: the passkey probe at 48 tokens
                    (2,000 steps), and repeat-single-char copy at size 8 (600 steps)
    extension       one RoPE base model (2 layers, d=64, 2 heads) trained at 256 tokens on the passkey probe
                    (1,200 steps of 16, once per seed), then PI, NTK, dynamic NTK, YaRN and Llama 3 (factor 2)
                    applied at evaluation only (no fine-tune: at 512 tokens it does not fit ~15 minutes on 2
                    cores); effective length per arm; the rules' bands here beside Llama 3.1 8B's (seeds 0 1).
                    Measured once: its base did not learn passkey at 256 tokens in these steps (every arm unrated)
    extension_text  the same on the offline text corpus (600 steps of 16): perplexity by length (seeds 0 1)
    from_config     tiny models with the per-layer positional setup of two presets (Llama 3.1 8B, Gemma 3 4B)
                    on the passkey probe

    .venv/bin/python bench/studies.py patterns [--base-url http://127.0.0.1:8000] [--seeds 0 1 2] [--out DIR]

Nothing is asserted: the tables are what the jobs measured. Start the service with two job slots (``posenc serve
--concurrency 2``) so the runs of a benchmark use both cores.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evaluation_tables import print_benchmark
from posenc_client import Client

PROBE_SETUP: dict[str, Any] = {
    "data": {"task": "probes", "probes": ["passkey"]},
    "model": {"layers": 4, "dim": 64, "heads": 4},
    "train": {"length": 48, "steps": 2000, "batch_size": 32, "lr": 1e-3, "warmup_steps": 100, "checkpoint_every": 500},
    "eval": {"lengths": [32, 48, 72, 96, 144, 192], "samples": 30},
}
COPY_SETUP: dict[str, Any] = {
    "data": {"task": "copy_single", "size": 8},
    "model": {"layers": 4, "dim": 64, "heads": 4},
    "train": {"steps": 600, "batch_size": 32, "lr": 1e-3, "warmup_steps": 60, "checkpoint_every": 200},
    "eval": {"samples": 50},
}
PATTERN_METHODS: list[dict[str, Any]] = [
    {"method": "rope"},
    {"method": "nope"},
    {"method": "rope", "pattern": "smollm3", "label": "rope3-nope1"},
    {"method": "rope", "pattern": "command_a", "label": "localrope3-nope1"},
    {"method": "rope", "pattern": "partial_0.25", "label": "partial0.25"},
]

RULES: list[dict[str, Any]] = [
    {"method": "rope_linear", "label": "pi"},
    {"method": "rope_ntk", "label": "ntk"},
    {"method": "rope_dynamic_ntk", "label": "dynamic_ntk"},
    {"method": "rope_yarn", "label": "yarn"},
    {"method": "rope_llama3", "label": "llama3"},
]
EXTENSION: dict[str, Any] = {"factor": 2}  # evaluation only: a fine-tune at 512 tokens does not fit the budget
# The extension studies' regime (posenc.extension_bands): at 256 tokens the fastest pair turns 256/2π = 40.7
# times, past YaRN's beta_fast (32), and two heads of 32 features give 16 pairs, so YaRN (kept 1, ramped 6,
# interpolated 9) and Llama 3 (5, 2, 9) each keep, ramp and interpolate pairs. Below 2π·32 ≈ 201 tokens no pair
# turns 32 times (ω_0 = 1) and YaRN's kept band is empty; at 48 tokens both rules are close to PI.
EXTENSION_LENGTH = 256
EXTENSION_MODEL = {"layers": 2, "dim": 64, "heads": 2}
# the seeds a study runs without --seeds: the extension studies train at 256 tokens, so two seeds fit ~15 minutes
STUDY_SEEDS: dict[str, list[int]] = {"extension": [0, 1], "extension_text": [0, 1]}

STUDIES: dict[str, list[dict[str, Any]]] = {
    "patterns": [
        {"methods": PATTERN_METHODS, **PROBE_SETUP},
        {"methods": PATTERN_METHODS, **COPY_SETUP},
    ],
    "extension": [
        {
            "methods": RULES,
            "extension": EXTENSION,
            "data": PROBE_SETUP["data"],
            "model": EXTENSION_MODEL,
            "train": {**PROBE_SETUP["train"], "length": EXTENSION_LENGTH, "steps": 1200, "batch_size": 16},
            "eval": {"lengths": [256, 384, 512], "samples": 10},
        }
    ],
    "extension_text": [
        {
            "methods": RULES,
            "extension": EXTENSION,
            "data": {"corpus": "stdlib"},
            "model": EXTENSION_MODEL,
            "train": {"length": EXTENSION_LENGTH, "steps": 600, "batch_size": 16, "lr": 2e-3, "warmup_steps": 60},
            "eval": {"lengths": [256, 512, 1024], "max_tokens": 16384},
        }
    ],
    "from_config": [
        {
            "methods": [{"config": "llama-3.1-8b"}, {"config": "gemma-3-4b"}],
            **PROBE_SETUP,
            "model": {"layers": 6, "dim": 64, "heads": 4},
        }
    ],
}


def describe(layer: dict[str, Any]) -> str:
    """One layer's setup in a few words: method, θ, rotated share, span, temperature."""
    words = [layer["method"]]
    if layer["params"].get("base") is not None:
        words.append(f"θ={layer['params']['base']:g}")
    if layer.get("rotary_fraction", 1.0) < 1.0:
        words.append(f"rotates {layer['rotary_fraction']:g}")
    for span in ("window", "chunk"):
        if layer.get(span):
            words.append(f"{span} {layer[span]}")
    if layer.get("temperature"):
        words.append(f"temperature {layer['temperature']}")
    return " ".join(words)


def run_study(client: Client, name: str, seeds: list[int], out: Path | None) -> None:
    for position, template in enumerate(STUDIES[name]):
        spec = dict(template) | {"seeds": seeds}
        job = client.jobs.create("benchmark", spec)
        print(f"== {name} [{position}]: job {job.id}, estimated {job.estimate_s} s on one worker", flush=True)
        print(f"   spec {json.dumps(spec)}", flush=True)
        job = client.jobs.wait(job.id, timeout=3 * 3600)
        if job.status != "succeeded" or job.result is None:
            print(f"   {job.status}: {job.error}")
            continue
        assert job.finished_at is not None
        wall = (job.finished_at - job.created_at).total_seconds()
        print(f"   wall {wall:.0f} s; artifacts: {', '.join(a.url for a in job.artifacts if a.name.endswith('.png'))}")
        print_benchmark(job.result, "   ")
        for line in job.result.get("findings", []):
            print(f"   finding: {line}")
        study = job.result.get("study")
        if study is not None:
            print(
                f"   base models (trained once per seed: {study['base_trained']}): "
                + "; ".join(
                    f"seed {base['seed']} by run '{base['trained_by']}' in {base['train_seconds']:.0f} s, "
                    f"in distribution {base['in_distribution']}"
                    for base in study["base_models"]
                )
            )
            for rule, bands in study["bands"]["rules"].items():
                here, there = bands["setup"], bands["reference"]
                print(
                    f"   bands {rule}: {here['counts'] or 'none (every pair scaled)'} of {here['pairs']} pairs here, "
                    f"{there['counts'] or 'none'} of {there['pairs']} in {study['bands']['reference']['name']}"
                )
            for warning in study["regime_warnings"]:
                print(f"   regime warning: {warning}")
            events = [event.event for event in client.jobs.events(job.id) if "base model" in event.event]
            print(f"   events: {len(events)} base-model lines, {sum(': trained by' in e for e in events)} 'trained by'")
        for label, setup in job.result.get("setups", {}).items():
            source = setup.get("config") or {}
            where = f"config {source['source']} (a unit of {source['unit']} layers)" if source else setup.get("pattern")
            print(f"   {label}: {where}; layers as trained: {[describe(layer) for layer in setup['layers']]}")
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{name}-{position}.json").write_text(job.model_dump_json(indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", choices=sorted(STUDIES))
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (extension studies: 0 1)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with Client(base_url=args.base_url, timeout=60) as client:
        for name in args.studies:
            run_study(client, name, args.seeds or STUDY_SEEDS.get(name, [0, 1, 2]), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
