"""The task catalogue as it appears on the wire (``GET /v1/tasks``): every job task with its family and unit,
and the suites."""

from __future__ import annotations

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


class TaskCatalogue(BaseModel):
    tasks: list[TaskInfo]
    suites: list[SuiteInfo]
