"""Quiver from Python.

Build or load a plan, run it, and get every product back as a ``pyarrow.Table`` or a
``polars.DataFrame`` (with an ``event`` column) without copying the product columns. Write
steps in Python (:class:`Step`) or as Polars functions (:func:`polars_step`); they run in
the same executor as the Rust steps, from a Python driver or from ``quiver run plan.toml``.

>>> import quiver
>>> plan = quiver.Plan()
>>> plan.add("numbers", "random_floats", count=3)
>>> plan.add("squared", "square", input="numbers")
>>> result = plan.run(events=4, threads=1)
>>> result["squared"].column_names
['event', 'value']
"""

from . import _quiver
from ._analysis import QUALITY_NAMES, Quality
from ._errors import PlanError, QuiverError, QuiverIOError, StepError
from ._optional import MissingExtraError
from ._plan import Plan, Result
from ._report import Report, report
from ._steps import Step, polars_step
from .query import open, sql

Batch = _quiver.Batch
"""The event batch a Python step's ``produce(batch)`` receives (for type hints)."""

__all__ = [
    "Plan",
    "Result",
    "Step",
    "Batch",
    "polars_step",
    "PlanError",
    "StepError",
    "QuiverError",
    "QuiverIOError",
    "MissingExtraError",
    "Quality",
    "QUALITY_NAMES",
    "Report",
    "report",
    "steps",
    "conditions",
    "open",
    "sql",
]
__version__ = _quiver.__version__


def steps() -> str:
    """The step catalogue (what ``quiver steps`` prints), including the ``python`` type."""
    return _quiver.describe_steps()


def conditions(dataset) -> dict:
    """The conditions of a dataset directory as ``{name: pyarrow.RecordBatch}``: what Python
    steps see as ``batch.conditions`` (``"BeamSpot"``, ``"CpeParams.det"``, ...)."""
    import os

    return _quiver.conditions(os.fspath(dataset))
