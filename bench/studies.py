"""The three studies of the docs' measured results (layer patterns, context extension, real configs), through
the job API of a running service (``make run`` or ``posenc serve``).

Each study is one or more benchmark jobs (3 seeds unless ``--seeds``), submitted with the SDK and waited for;
the script prints each job's wall time (created_at to finished_at), its id, the runs that did not learn their
training sizes, per method and size the headline metric's mean +- std over seeds, the effective lengths, and
the job's generated summary.

    patterns        RoPE everywhere, NoPE everywhere, 3:1 RoPE/NoPE (SmolLM3's pattern), local RoPE + global
                    NoPE (Cohere Command A's: 3 sliding-window RoPE layers, window L/4, : 1 global NoPE layer)
                    and partial rotary 0.25, on a 4-layer d=64 model: the passkey probe at 48 tokens
                    (2,000 steps), and repeat-single-char copy at size 8 (600 steps)
    extension       one RoPE base model (2 layers, d=64) trained at 48 tokens on the probes (3,000 steps, once per
                    seed), then PI, NTK, dynamic NTK, YaRN and Llama 3 (factor 2) applied at evaluation only and
                    after a 150-step fine-tune at 96 tokens; effective length per arm
    extension_text  the same on the offline text corpus: perplexity by length
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
EXTENSION: dict[str, Any] = {"factor": 2, "finetune_steps": 150}
SMALL = {"layers": 2, "dim": 64, "heads": 4}

STUDIES: dict[str, list[dict[str, Any]]] = {
    "patterns": [
        {"methods": PATTERN_METHODS, **PROBE_SETUP},
        {"methods": PATTERN_METHODS, **COPY_SETUP},
    ],
    "extension": [
        {
            "methods": RULES,
            "extension": EXTENSION,
            **PROBE_SETUP,
            "model": SMALL,
            "train": {**PROBE_SETUP["train"], "steps": 3000},
        }
    ],
    "extension_text": [
        {
            "methods": RULES,
            "extension": EXTENSION,
            "data": {"corpus": "stdlib"},
            "model": SMALL,
            "train": {"length": 64, "steps": 2000, "batch_size": 32, "lr": 2e-3, "warmup_steps": 100},
            "eval": {"lengths": [64, 128, 256], "max_tokens": 16384},
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
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with Client(base_url=args.base_url, timeout=60) as client:
        for name in args.studies:
            run_study(client, name, args.seeds, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
