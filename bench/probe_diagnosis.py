"""Why a model does not learn a key-value probe: train a probes model the way a job does, then decode its answers
greedily and sort each wrong one by where it came from.

A key-value probe (passkey, multi_key, no_literal) asks for the 5 digits after one key in a context that holds
other keyed values. A wrong answer is either another key's value copied whole (the model found *a* value and
copied it, but not the one the query names: the lookup failed), an unkeyed digit run of the context (passkey
and no_literal have them), or digits that are none of those (the copy failed). For the values copied from
another key, the script also says which statement it was, counted back from the query (1: the statement
nearest the query): a model that copies by position rather than by key picks the same place every time.

    .venv/bin/python bench/probe_diagnosis.py --probes multi_key common_words --steps 1500 --seeds 0 1
    .venv/bin/python bench/probe_diagnosis.py --probes passkey common_words --steps 1500 --layers 2

One torch thread per run; a model at the leaderboard's size (2 layers, d = 64, 4 heads, L = 64) takes about
0.1 s a step on one idle core. Prints one line per (probe, seed) and, with ``--json``, writes the counts.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from posenc.schemas.jobs import JobSpec
from posenc.tasks import family_of
from posenc.tasks.base import BOS, SEP
from posenc.tasks.probes import VOCAB, Probes
from posenc.training.families import trainer_for
from posenc.training.train import train

KEYED = re.compile(r"([A-Z]{1,2})=(\d{5})\.")  # a keyed statement of a key-value probe
DIGIT_RUN = re.compile(r"(?<![=\d])(\d{5})(?![\d.])")  # an unkeyed 5-digit run


def spec_of(args: argparse.Namespace, seed: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "methods": [{"method": args.method}],
            "data": {"task": "probes", "probes": args.probes},
            "model": {"layers": args.layers, "dim": args.dim, "heads": args.heads},
            "train": {"length": args.length, "steps": args.steps, "batch_size": 32, "lr": args.lr},
            "eval": {"lengths": [args.length], "samples": args.samples},
            "seeds": [seed],
            "device": "cpu",
        }
    )


@torch.inference_mode()
def teacher_forced(model: Any, prompts: list[list[int]], answers: list[list[int]]) -> list[list[bool]]:
    """Per answer token, whether the argmax is right given the right tokens before it."""
    ids = torch.tensor([[BOS, *p, SEP, *a] for p, a in zip(prompts, answers, strict=True)], dtype=torch.int64)
    start = len(prompts[0]) + 1  # input position of SEP: it predicts the first answer token
    width = len(answers[0])
    predicted = model(ids[:, :-1])[:, start : start + width].argmax(-1)  # (B, answer)
    right: list[list[bool]] = (predicted == ids[:, start + 1 : start + 1 + width]).tolist()
    return right


@torch.inference_mode()
def greedy(model: Any, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """``tokens`` greedy steps after ``BOS prompt SEP`` (prompts of one length, as a probe's at one size)."""
    ids = torch.tensor([[BOS, *prompt, SEP] for prompt in prompts], dtype=torch.int64)  # (B, T)
    for _ in range(tokens):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)  # (B, T + 1)
    return ids[:, -tokens:].tolist()


def classify(prompt: str, answer: str, decoded: str) -> tuple[str, int | None]:
    """Where a decoded answer came from: ``right``, ``other key`` (with the statement's place counted back from
    the query), ``unkeyed run`` or ``elsewhere``."""
    if decoded == answer:
        return "right", None
    statements = [(match.group(2), match.end()) for match in KEYED.finditer(prompt)]
    for place, (value, _) in enumerate(reversed(statements), start=1):
        if value == decoded:
            return "other key", place
    if decoded in DIGIT_RUN.findall(prompt):
        return "unkeyed run", None
    return "elsewhere", None


def diagnose(args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    spec = spec_of(args, seed)
    family = family_of(spec)
    assert isinstance(family, Probes)
    trainer = trainer_for(family)
    data = trainer.prepare(None, None)
    started = time.perf_counter()
    outcome = train(trainer.model_config(spec.methods[0], len(data.vocab)), seed, spec.train, data.batches, threads=1)
    seconds = time.perf_counter() - started
    model = outcome.model.eval()
    rows = []
    for probe in args.probes:
        if probe not in ("passkey", "multi_key", "no_literal"):
            continue
        generator = torch.Generator().manual_seed(10_000 + seed)
        depths = [index / (args.samples - 1) for index in range(args.samples)]
        instances = [family.instance(probe, args.length, depth, generator) for depth in depths]
        decoded = greedy(model, [item.prompt for item in instances], 5)
        forced = teacher_forced(model, [item.prompt for item in instances], [item.target for item in instances])
        kinds: Counter[str] = Counter()
        places: Counter[int] = Counter()
        first_source: Counter[str] = Counter()  # whose value the first decoded digit starts
        first_digit = 0
        aligned = [0] * 5  # per decoded digit: the same digit at that place of some keyed value in the context
        for item, out in zip(instances, decoded, strict=True):
            prompt = "".join(VOCAB[i] for i in item.prompt)
            answer, text = "".join(VOCAB[i] for i in item.target), "".join(VOCAB[i] for i in out)
            kind, place = classify(prompt, answer, text)
            kinds[kind] += 1
            first_digit += text[:1] == answer[:1]
            values = [value for _, value in KEYED.findall(prompt)]
            others = {value[0] for value in values if value != answer}
            for i, digit in enumerate(text):
                aligned[i] += any(value[i] == digit for value in values)
            first_source["the queried value" if text[:1] == answer[:1] else
                         "another key's value" if text[:1] in others else "neither"] += 1  # fmt: skip
            if place is not None:
                places[place] += 1
        per_token = [sum(row[i] for row in forced) / len(forced) for i in range(len(forced[0]))]
        rows.append(
            {
                "probe": probe,
                "seed": seed,
                "steps": args.steps,
                "layers": args.layers,
                "method": args.method,
                "final_loss": outcome.final_loss,
                "train_seconds": round(seconds, 1),
                "instances": len(instances),
                "kinds": dict(kinds),
                "other_key_places": dict(sorted(places.items())),
                "first_digit_right": first_digit / len(instances),
                "first_digit_source": dict(first_source),
                "teacher_forced_per_digit": [round(value, 3) for value in per_token],
                "decoded_digit_at_its_place_in_some_value": [round(count / len(instances), 3) for count in aligned],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", nargs="+", default=["multi_key", "common_words"])
    parser.add_argument("--method", default="rope")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--samples", type=int, default=200, help="instances decoded per probe")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        for row in diagnose(args, seed):
            rows.append(row)
            kinds = row["kinds"]
            share = {kind: kinds.get(kind, 0) / row["instances"] for kind in ("right", "other key", "unkeyed run")}
            print(
                f"{row['probe']} {args.method} {args.layers} layers seed {seed}, {args.steps} steps "
                f"({row['train_seconds']} s, final loss {row['final_loss']:.3f}): right {share['right']:.2f}, "
                f"another key's value {share['other key']:.2f} (places back from the query "
                f"{row['other_key_places']}), an unkeyed run {share['unkeyed run']:.2f}, elsewhere "
                f"{kinds.get('elsewhere', 0) / row['instances']:.2f}; first digit right {row['first_digit_right']:.2f} "
                f"(from {row['first_digit_source']}); teacher-forced per digit {row['teacher_forced_per_digit']}; "
                f"decoded digit at its place in some value {row['decoded_digit_at_its_place_in_some_value']}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
