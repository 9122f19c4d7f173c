"""Context-extension studies (LCEG-style): one RoPE base model per seed, every scaling rule applied to it.

A benchmark whose spec has ``extension`` is a study. Its runs are *arms*, each one (arm, seed):

    base            the base model as trained, evaluated as is (every arm's baseline)
    <rule>          the base model's weights with the rule's frequencies in every layer, evaluated (no training)
    base+ft         with ``finetune_steps``: the base model trained further at ``finetune_length``, unscaled
                    (the fine-tune's control: what the longer data alone buys)
    <rule>+ft       the base model fine-tuned at ``finetune_length`` with the rule in place, then evaluated

The base model of a seed is trained once, by the first arm of that seed to run, and loaded by every other
(``posenc.training.jobs``: under ``job_dir/checkpoints/base-seed<s>/``, behind a file lock, whichever worker
runs the arm). Each arm's record says whether it trained the base or reused it, and the job's events say so as
they happen. This module is the spec side: the arms, their params, the fine-tune's training.

An arm's params that it leaves out are filled from the study (:func:`arm_ref`): ``base`` (θ) from the base
model, ``factor`` from ``extension.factor`` and ``original_max_position_embeddings`` from ``train.length``, so
"YaRN" means YaRN extending this base model by that factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from posenc.extension_bands import study_bands
from posenc.pe import get_method
from posenc.schemas.jobs import ExtensionSpec, JobSpec, MethodRef, TrainSpec

BASE_LABEL = "base"
FINETUNED = "+ft"


@dataclass(frozen=True)
class Arm:
    """One arm of a study: its label, the method it evaluates with (params filled), and whether it fine-tunes."""

    label: str
    ref: MethodRef
    finetune: bool
    is_base: bool


def study(spec: JobSpec) -> ExtensionSpec:
    if spec.extension is None:
        raise ValueError("the spec is no context-extension study")
    return spec.extension


def base_theta(spec: JobSpec) -> float | None:
    """The base model's rotary base θ (its params' or its method's default); None for a method without one."""
    base = study(spec).base
    if base.method is None:
        return None  # a config: refused by the study's check
    method = get_method(base.method)
    parsed = method.parse_params(method.training_params(base.params))
    value = getattr(parsed, "base", None)
    return None if value is None else float(value)


def arm_ref(spec: JobSpec, ref: MethodRef) -> MethodRef:
    """``ref`` with the study's values for the params it leaves out and its method takes: ``base`` from the base
    model, ``factor`` from ``extension.factor``, ``original_max_position_embeddings`` from ``train.length``."""
    if ref.method is None:
        return ref  # a config: refused by the study's check
    fields = get_method(ref.method).params_model.model_fields
    fills: dict[str, Any] = {
        "base": base_theta(spec),
        "factor": study(spec).factor,
        "original_max_position_embeddings": spec.train.length,
    }
    params = dict(ref.params)
    for key, value in fills.items():
        if key in fields and key not in params and value is not None:
            params[key] = value
    return ref.model_copy(update={"params": params})


def arms(spec: JobSpec) -> list[Arm]:
    """The study's arms in run order: the base, each rule at evaluation only, then (with a fine-tune) the base
    fine-tuned and each rule fine-tuned."""
    extension = study(spec)
    rules = [(ref.name, arm_ref(spec, ref)) for ref in spec.methods]
    chosen = [Arm(BASE_LABEL, extension.base, finetune=False, is_base=True)]
    chosen += [Arm(name, ref, finetune=False, is_base=False) for name, ref in rules]
    if extension.finetune_steps:
        chosen.append(Arm(BASE_LABEL + FINETUNED, extension.base, finetune=True, is_base=True))
        chosen += [Arm(name + FINETUNED, ref, finetune=True, is_base=False) for name, ref in rules]
    return chosen


def finetune_length(spec: JobSpec) -> int:
    extension = study(spec)
    if extension.finetune_length is not None:
        return extension.finetune_length
    return max(2, round(extension.factor * spec.train.length))


def finetune_spec(spec: JobSpec) -> TrainSpec:
    """The fine-tune's training: ``finetune_steps`` at ``finetune_length``, the base's batch size and weight
    decay, ``finetune_lr`` (default the base's lr), a warmup of a tenth of its steps, checkpoints as the base's."""
    extension = study(spec)
    steps = max(1, extension.finetune_steps)
    return spec.train.model_copy(
        update={
            "length": finetune_length(spec),
            "steps": steps,
            "lr": extension.finetune_lr if extension.finetune_lr is not None else spec.train.lr,
            "warmup_steps": steps // 10,
            "checkpoint_every": min(spec.train.checkpoint_every, steps),
        }
    )


def finetune_job_spec(spec: JobSpec, arm: Arm) -> JobSpec:
    """The spec the fine-tune's data and model come from: the study's, with the fine-tune's training and the
    arm's method alone."""
    return spec.model_copy(update={"train": finetune_spec(spec), "methods": [arm.ref], "extension": None})


def regime(spec: JobSpec) -> tuple[dict[str, Any], list[str]]:
    """The study's regime (``posenc.extension_bands.study_bands``): per rule, how the base model's pairs (head dim
    = model.dim / model.heads, θ of the base, L = train.length) fall into its bands beside the reference model's,
    and a warning per band a rule relies on that holds no pair. A rule whose frequencies cannot be read per pair
    is listed under ``"unbanded"`` with the reason."""
    theta = base_theta(spec)
    report: dict[str, Any] = {"rules": {}, "unbanded": {}}
    if theta is None:
        return report, []
    rotary_dim = spec.model.dim // spec.model.heads
    rules: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, ref in ((ref.name, arm_ref(spec, ref)) for ref in spec.methods):
        if ref.method is not None and not ref.patterned:
            rules[name] = (ref.method, dict(ref.params))
        else:
            report["unbanded"][name] = "a layer pattern or config: no single rule per pair"
    bands, warnings = study_bands(rules, theta=theta, original_length=spec.train.length, rotary_dim=rotary_dim)
    return {**bands, "unbanded": report["unbanded"] | bands["unbanded"]}, warnings
