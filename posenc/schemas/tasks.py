"""The task catalogue as it appears on the wire (``GET /v1/tasks``): every job task with its family and unit,
the suites and the named layer patterns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TaskInfo(BaseModel):
    task: str = Field(description="the data.task name ('(data.corpus)' for text, chosen by its corpus)")
    family: str
    unit: str = Field(description="the unit of every size a spec gives or a result reports for this task")
    train_field: str = Field(description="where a spec gives the training size, e.g. 'data.size'")
    eval_field: str = Field(description="where a spec gives the evaluation sizes, e.g. 'eval.sizes'")
    metric: str = Field(description="the headline metric of result rows and plots")
    metrics: list[str]
    higher_is_better: bool
    about: str


class SuiteInfo(BaseModel):
    name: str
    description: str
    tasks: list[str]
    seeds: list[int]
    budget: str = Field(description="the duration it is sized for")


class PatternInfo(BaseModel):
    name: str = Field(description="the value of a method entry's 'pattern'")
    model: str = Field(description="the models that ship this layer pattern")
    description: str
    unit: list[dict[str, Any]] = Field(
        description="the repeating unit's layer overrides at a local span of 16 tokens (a job's span is a quarter "
        "of its training length, at least 4)"
    )


class TaskCatalogue(BaseModel):
    tasks: list[TaskInfo]
    suites: list[SuiteInfo]
    patterns: list[PatternInfo] = Field(description="the named layer patterns a decoder job's method entry may use")
