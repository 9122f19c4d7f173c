"""Image tasks and the tiny ViT: procedural scenes at any resolution, the PE as the model's only variable, and
image benchmark jobs (spec checks, rows by resolution, the accuracy plot)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from posenc.errors import InvalidInput
from posenc.jobspec import job_tokens, validate_spec
from posenc.schemas.jobs import JobCreate, JobSpec, TrainSpec
from posenc.tasks import family_of
from posenc.tasks.images import IMAGE_TASKS, patch_positions
from posenc.training.evaluate import evaluate_images
from posenc.training.hooks import NoHooks
from posenc.training.jobs import run_job
from posenc.training.train import Batch, train
from posenc.training.vision import DOT_RADIUS, draw_scenes, image_batch, render, task_classes
from posenc.training.vit import VisionTransformer, ViTConfig, token_positions

TASKS = IMAGE_TASKS
METHODS = ("nope", "sinusoidal_2d", "rope_2d_axial", "alibi_2d", "vit_learned", "rope_mixed")


def config(method: str, **overrides: Any) -> ViTConfig:
    values: dict[str, Any] = {
        "num_classes": 4,
        "image_size": 16,
        "patch_size": 4,
        "layers": 2,
        "dim": 32,
        "heads": 2,
        "method": method,
    }
    return ViTConfig(**(values | overrides))


# ------------------------------------------------------------------------------------------------- data
@pytest.mark.parametrize("task", TASKS)
def test_batches_are_deterministic_per_seed(task: str) -> None:
    first = image_batch(task, 8, 16, torch.Generator().manual_seed(3))
    again = image_batch(task, 8, 16, torch.Generator().manual_seed(3))
    other = image_batch(task, 8, 16, torch.Generator().manual_seed(4))
    assert first[0].shape == (8, 3, 16, 16)
    assert first[0].dtype == torch.float32
    assert first[1].shape == (8,)
    assert first[1].dtype == torch.int64
    assert torch.equal(first[0], again[0])
    assert torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


@pytest.mark.parametrize("task", TASKS)
def test_a_scene_looks_the_same_at_two_resolutions(task: str) -> None:
    """The 64 px render box-downsampled 2 x 2 is the 32 px render up to edge pixels."""
    scenes = draw_scenes(task, 64, torch.Generator().manual_seed(0))
    downsampled = F.avg_pool2d(render(scenes, 64), 2)  # (B, 3, 32, 32)
    difference = (downsampled - render(scenes, 32)).abs().mean(dim=(1, 2, 3))  # (B,)
    assert float(difference.max()) < 0.01
    # a different scene is far from it
    assert float((render(scenes, 32)[1:] - render(scenes, 32)[:-1]).abs().mean()) > 0.05


def test_scenes_do_not_depend_on_the_resolution_they_are_drawn_for() -> None:
    """image_batch draws the scenes before the noise, so the labels of a seed are the same at every size."""
    labels = [image_batch("shapes", 32, size, torch.Generator().manual_seed(1))[1] for size in (16, 48)]
    assert torch.equal(labels[0], labels[1])


@pytest.mark.parametrize("task", TASKS)
def test_labels_are_balanced(task: str) -> None:
    labels = draw_scenes(task, 4000, torch.Generator().manual_seed(0)).labels
    counts = torch.bincount(labels, minlength=len(task_classes(task))).double()
    expected = 4000 / len(task_classes(task))
    assert float((counts / expected - 1).abs().max()) < 0.15


def test_position_labels_follow_the_geometry() -> None:
    quadrant = draw_scenes("quadrant", 500, torch.Generator().manual_seed(0))
    red = quadrant.centre[:, -1]  # (B, 2): the red dot is drawn last
    halves = (red >= 0.5).long()  # (B, 2)
    assert torch.equal(halves[:, 0] * 2 + halves[:, 1], quadrant.labels)
    assert bool(((red - 0.5).abs() >= DOT_RADIUS).all())  # wholly inside its quadrant

    above = draw_scenes("above_left", 500, torch.Generator().manual_seed(0))
    offset = above.centre[:, 1] - above.centre[:, 0]  # (B, 2): blue − red
    assert torch.equal(((offset[:, 0] > 0) & (offset[:, 1] > 0)).long(), above.labels)
    assert float(offset.abs().min()) >= 0.12

    diagonal = draw_scenes("same_diagonal", 500, torch.Generator().manual_seed(0))
    offset = (diagonal.centre[:, 1] - diagonal.centre[:, 0]).abs()  # (B, 2)
    gap = (offset[:, 0] - offset[:, 1]).abs()  # (B,)
    yes = diagonal.labels == 1
    assert float(gap[yes].max()) < 1e-9
    assert float(gap[~yes].min()) >= 0.15 - 1e-9
    for scenes in (quadrant, above, diagonal):
        assert bool((scenes.centre >= DOT_RADIUS - 1e-9).all())
        assert bool((scenes.centre <= 1 - DOT_RADIUS + 1e-9).all())


def test_every_shape_class_is_drawn_inside_the_image() -> None:
    scenes = draw_scenes("shapes", 400, torch.Generator().manual_seed(0))
    assert set(scenes.labels.tolist()) == set(range(10))
    half = scenes.half_size[:, 0, None]  # (B, 1)
    assert bool((scenes.half_size >= 0.075 - 1e-9).all())
    assert bool((scenes.half_size <= 0.225 + 1e-9).all())
    assert bool((scenes.centre[:, 0] >= half - 1e-9).all())
    assert bool((scenes.centre[:, 0] <= 1 - half + 1e-9).all())


def test_evaluation_scores_the_same_scenes_at_every_resolution() -> None:
    """An oracle that reads the red dot's quadrant off the pixels is right at 16 and 48 px alike."""

    def red_quadrant(images: torch.Tensor) -> torch.Tensor:
        red = (images[:, 0] > 0.6) & (images[:, 1] < 0.45) & (images[:, 2] < 0.45)  # (B, S, S)
        size = images.shape[-1]
        coords = (torch.arange(size) + 0.5) / size  # (S,)
        weight = red.double().sum(dim=(1, 2)).clamp_min(1)  # (B,)
        row = (red.double() * coords[None, :, None]).sum(dim=(1, 2)) / weight  # (B,)
        col = (red.double() * coords[None, None, :]).sum(dim=(1, 2)) / weight
        label = (row >= 0.5).long() * 2 + (col >= 0.5).long()  # (B,)
        return F.one_hot(label, 4).float()  # (B, 4) logits

    for resolution in (16, 48):
        score = evaluate_images(red_quadrant, "quadrant", resolution, samples=200)
        assert score.resolution == resolution
        assert score.samples == 200
        assert score.accuracy > 0.97


# ------------------------------------------------------------------------------------------------ model
def test_token_positions_put_the_cls_token_first_at_minus_one() -> None:
    two_d = token_positions(2, 3, 2, prefix=1)
    assert two_d.tolist() == [[-1, -1], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert token_positions(2, 3, 1, prefix=1).tolist() == [-1, 0, 1, 2, 3, 4, 5]
    for axes in (1, 2):
        for prefix in (0, 1):
            assert torch.equal(token_positions(3, 4, axes, prefix=prefix), patch_positions(3, 4, axes, prefix=prefix))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cls_token", [True, False])
def test_the_vit_runs_at_several_resolutions(method: str, cls_token: bool) -> None:
    model = VisionTransformer(config(method, cls_token=cls_token), seed=0)
    for size in (8, 16, 24):
        images, _ = image_batch("quadrant", 3, size, torch.Generator().manual_seed(0))
        logits = model(images)
        assert logits.shape == (3, 4)
        assert bool(torch.isfinite(logits).all())
    logits.sum().backward()
    learned = [p for name, p in model.named_parameters() if ".learned." in f".{name}"]
    assert all(p.grad is not None for p in learned)


def test_a_resolution_must_be_whole_patches() -> None:
    model = VisionTransformer(config("nope"), seed=0)
    with pytest.raises(ValueError, match="multiple of the patch size"):
        model(torch.zeros(1, 3, 18, 18))


def _non_pe_weights(model: VisionTransformer) -> dict[str, torch.Tensor]:
    return {name: value for name, value in model.state_dict().items() if "pe." not in f".{name}"}


def test_non_pe_weights_are_the_same_for_every_method() -> None:
    reference = _non_pe_weights(VisionTransformer(config("nope"), seed=5))
    assert any(name.startswith("patch_embedding") for name in reference)
    for method in METHODS[1:]:
        weights = _non_pe_weights(VisionTransformer(config(method), seed=5))
        assert weights.keys() == reference.keys()
        assert all(torch.equal(weights[name], reference[name]) for name in reference), method
    other_seed = _non_pe_weights(VisionTransformer(config("nope"), seed=6))
    assert not torch.equal(other_seed["head.weight"], reference["head.weight"])


def test_per_layer_methods_get_one_instance_per_layer() -> None:
    model = VisionTransformer(config("rope_mixed"), seed=0)
    tables = [p for name, p in model.named_parameters() if name.startswith("blocks.") and ".pe.learned." in name]
    assert len(tables) == 2
    assert not torch.equal(tables[0], tables[1])


def test_training_lowers_the_loss() -> None:
    """30 steps on one fixed batch of quadrant images (on fresh batches the task sits at chance for a few
    hundred steps before it is learned)."""
    fixed = Batch(*image_batch("quadrant", 16, 16, torch.Generator().manual_seed(0)))
    spec = TrainSpec(steps=30, batch_size=16, lr=1e-2, warmup_steps=3)
    outcome = train(config("rope_2d_axial", layers=1), 0, spec, lambda generator: fixed)
    assert sum(outcome.losses[-5:]) / 5 < 0.8 * sum(outcome.losses[:5]) / 5


# ------------------------------------------------------------------------------------------------- jobs
def image_spec(methods: list[Any], **overrides: Any) -> JobSpec:
    raw: dict[str, Any] = {
        "methods": [m if isinstance(m, dict) else {"method": m} for m in methods],
        "data": {"task": "quadrant", "image_size": 16, "patch_size": 4},
        "model": {"layers": 1, "dim": 16, "heads": 2},
        "train": {"steps": 3, "batch_size": 4, "warmup_steps": 1, "checkpoint_every": 2},
        "eval": {"resolutions": [8, 16, 24], "samples": 6},
    }
    return JobSpec.model_validate(raw | overrides)


def test_image_fields_get_their_defaults() -> None:
    spec = JobSpec.model_validate({"methods": [{"method": "nope"}], "data": {"task": "shapes"}})
    images = family_of(spec)
    assert (images.name, images.unit, images.train_size(), images.patch) == ("images", "pixels", 32, 4)  # type: ignore[attr-defined]
    assert images.eval_sizes() == [16, 24, 32, 48, 64]
    odd = JobSpec.model_validate({"methods": [{"method": "nope"}], "data": {"task": "shapes", "patch_size": 8}})
    assert family_of(odd).eval_sizes() == [16, 24, 32, 48, 64]
    assert family_of(image_spec(["nope"], eval={})).eval_sizes() == [8, 12, 16, 24, 32]


@pytest.mark.parametrize(
    ("overrides", "loc", "message"),
    [
        ({"data": {"task": "quadrant", "image_size": 18}}, ("data", "image_size"), "not a multiple of data.patch_size"),
        ({"eval": {"resolutions": [16, 30]}}, ("eval", "resolutions", 1), "30 px is not a multiple"),
        ({"eval": {"resolutions": [256]}}, ("eval", "resolutions", 0), "at most 32² are allowed"),
        ({"eval": {"resolutions": []}}, ("eval", "resolutions"), "at least one size"),
        ({"eval": {"lengths": [16]}}, ("eval", "lengths"), "eval.resolutions"),
        ({"methods": [{"method": "sinusoidal_3d"}]}, ("methods", 0, "method"), "3D positions"),
        (
            {"methods": [{"method": "alibi_2d", "params": {"max_bias": -1}}]},
            ("methods", 0, "params", "max_bias"),
            "greater than 0",
        ),
        ({"model": {"layers": 1, "dim": 18, "heads": 1}}, ("methods", 0, "params"), "sinusoidal_2d"),
    ],
)
def test_image_spec_errors_name_the_field(overrides: dict[str, Any], loc: tuple[Any, ...], message: str) -> None:
    overrides = dict(overrides)
    spec = image_spec(overrides.pop("methods", ["sinusoidal_2d"]), **overrides)
    with pytest.raises(InvalidInput, match=message) as refused:
        validate_spec("benchmark", spec)
    assert refused.value.loc[: 2 + len(loc)] == ("body", "spec", *loc)


def test_text_specs_refuse_the_image_fields() -> None:
    text = {"methods": [{"method": "rope"}], "data": {"corpus": "stdlib"}}
    with pytest.raises(InvalidInput, match="'resolutions' is not read by text data") as refused:
        validate_spec("train", JobSpec.model_validate(text | {"eval": {"resolutions": [16]}}))
    assert refused.value.loc == ("body", "spec", "eval", "resolutions")
    # cls_token is ignored by text models: a spec dumped whole (as the gateway hands it to the worker) passes
    validate_spec("train", JobSpec.model_validate(JobSpec.model_validate(text).model_dump()))
    with pytest.raises(InvalidInput, match="'image_size' is not read by sequence data") as foreign:
        validate_spec("train", JobSpec.model_validate({"methods": [{"method": "rope"}],
                                                       "data": {"task": "copy", "image_size": 32}}))  # fmt: skip
    assert foreign.value.loc == ("body", "spec", "data", "image_size")
    with pytest.raises(InvalidInput, match="2D positions"):  # the text models stay 1D
        validate_spec("train", JobSpec.model_validate({**text, "methods": [{"method": "sinusoidal_2d"}]}))


def test_image_specs_accept_the_vision_methods_and_1d_ones() -> None:
    validate_spec("benchmark", image_spec([*METHODS, "rope", "alibi"]))
    validate_spec(
        "train", image_spec(["rope_2d_axial"], model={"layers": 1, "dim": 16, "heads": 2, "cls_token": False})
    )


def test_image_job_tokens_count_patches() -> None:
    create = JobCreate.model_validate({"kind": "benchmark", "spec": image_spec(["nope", "alibi_2d"]).model_dump()})
    tokens = {8: 4 + 1, 16: 16 + 1, 24: 36 + 1}  # patches + CLS per image
    per_run = 3 * 4 * tokens[16] + 6 * sum(tokens.values())
    assert job_tokens(create) == 2 * per_run


def test_image_benchmark_job_end_to_end(tmp_path: Path) -> None:
    spec = image_spec(["nope", "sinusoidal_2d"], seeds=[0, 1])
    result = run_job("benchmark", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks())
    data = result["data"]
    assert (data["protocol"], data["unit"], data["sizes"], data["train_size"]) == (
        "top1_accuracy", "pixels", [8, 16, 24], 16
    )  # fmt: skip
    assert data["tokens"] == {"8": 4 + 1, "16": 16 + 1, "24": 36 + 1}  # patches and the CLS token
    table = result["table"]
    assert len(table) == 2 * 2 * 3
    assert {tuple(sorted(row)) for row in table} == {
        ("in_distribution", "learned", "method", "metric", "seed", "size", "value")
    }
    assert {row["metric"] for row in table} == {"accuracy"}
    assert all(0 <= row["value"] <= 1 and math.isfinite(row["value"]) for row in table)
    summary = result["summary"]
    assert len(summary) == 2 * 3
    assert all(row["seeds"] == 2 and row["reference_size"] == 16 for row in summary)
    with (tmp_path / "job" / "table.csv").open() as handle:
        assert next(csv.reader(handle)) == ["method", "seed", "size", "metric", "value", "learned", "in_distribution"]
    assert (tmp_path / "job" / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "job" / "table.json").read_text())["table"] == table


def test_image_train_job_saves_the_vit(tmp_path: Path) -> None:
    spec = image_spec(["rope_2d_axial"], data={"task": "shapes", "image_size": 8, "patch_size": 4})
    result = run_job("train", spec, job_dir=tmp_path / "job", artifact_root=tmp_path, hooks=NoHooks())
    assert (result["data"]["train_size"], result["data"]["unit"]) == (8, "pixels")
    assert 0 <= result["in_distribution"]["accuracy"] <= 1
    assert result["tokens_per_s"] is not None
    assert (tmp_path / "job" / "model.safetensors").is_file()
    metadata = json.loads((tmp_path / "job" / "model.json").read_text())
    assert metadata["config"]["patch_size"] == 4
    assert len(metadata["vocab"]) == 10
    checkpoint = JobSpec.model_validate({**spec.model_dump(), "checkpoint": "job", "eval": {}})
    with pytest.raises(InvalidInput, match="trained an images model"):
        run_job("extrapolate", checkpoint, job_dir=tmp_path / "ex", artifact_root=tmp_path, hooks=NoHooks())
