"""Tasks by name: `get_task("RTE", data_dir=...)`, and `register_task` for new ones.

`get_task` takes one set of keyword arguments for every task (the flags of
`run_finetuning.py`) and hands each task's factory the ones its signature
names. Built in: the nine GLUE tasks (case-insensitive, with aliases such as
`sst2`), `text_classification`, `squad`, `squad_v2`, and the CoNLL tagging
tasks `ner`, `chunk` and `tagging`.

Example:

>>> task = get_task("sts-b", data_dir="/nowhere", text_column="ignored by GLUE")
>>> task.name, task.default_epochs, task.default_max_seq_length
('STS-B', 10, 128)
>>> get_task("squad_v2").default_max_seq_length
512
>>> get_task("imdb")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: --task: unknown task 'imdb'; choose from CoLA, MNLI, ..., squad_v2, tagging, text_classification
"""

from __future__ import annotations

import functools
import inspect
from typing import Callable, Optional

from electra_tf.finetuning.glue import GLUE_SPECS, TASK_ALIASES, GlueTask
from electra_tf.finetuning.squad.task import SquadTask
from electra_tf.finetuning.tagging import conll2003_task, generic_task
from electra_tf.finetuning.task import Task
from electra_tf.finetuning.text_classification import TextClassificationTask

_FACTORIES: dict[str, Callable[..., Task]] = {}  # lower-case name or alias → factory
_NAMES: set[str] = set()  # the names error messages offer


def register_task(name: str, factory: Callable[..., Task], aliases: tuple = ()) -> None:
    """Makes `get_task(name)` (or an alias; any case) return `factory(data_dir=..., **its kwargs)`."""
    _NAMES.add(name)
    for key in (name, *aliases):
        _FACTORIES[key.lower()] = factory


def task_names() -> list[str]:
    return sorted(_NAMES)


def _accepted_kwargs(factory: Callable, kwargs: dict) -> dict:
    parameters = inspect.signature(factory).parameters
    return {k: v for k, v in kwargs.items() if k in parameters}


def get_task(name: str, data_dir: Optional[str] = None, **kwargs) -> Task:
    """The task called `name`; kwargs its factory does not take are ignored.

    Unknown names raise a ValueError naming `--task`.
    """
    factory = _FACTORIES.get(name.strip().lower())
    if factory is None:
        raise ValueError(f"--task: unknown task {name!r}; choose from {', '.join(task_names())}")
    return factory(data_dir=data_dir, **_accepted_kwargs(factory, kwargs))


for _name, _spec in GLUE_SPECS.items():
    register_task(_name, functools.partial(GlueTask, _spec),
                  aliases=tuple(alias for alias, name in TASK_ALIASES.items() if name == _name))
register_task("text_classification", TextClassificationTask, aliases=("classification",))
register_task("squad", functools.partial(SquadTask, v2=False), aliases=("squad_v1", "squad1.1", "squad_v1.1"))
register_task("squad_v2", functools.partial(SquadTask, v2=True), aliases=("squad2", "squad2.0", "squadv2"))
register_task("ner", conll2003_task("ner", label_column=3), aliases=("conll2003", "conll_ner"))
register_task("chunk", conll2003_task("chunk", label_column=2), aliases=("chunking",))
register_task("tagging", generic_task, aliases=("token_classification",))
