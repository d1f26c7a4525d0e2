"""Plans built or loaded from Python, run by the Rust executor."""

from __future__ import annotations

import os

from . import _quiver
from ._steps import register_class


class Plan:
    """A plan: labelled steps, validated exactly as a TOML plan (same messages, raised as
    :class:`quiver.PlanError`).

    >>> plan = Plan()
    >>> plan.add("numbers", "random_floats", count=10)
    >>> plan.add("squared", "square", input="numbers")
    >>> print(plan.check().splitlines()[0])
     1. numbers (random_floats, cpu)
    """

    def __init__(self):
        self._plan = _quiver._Plan()

    @classmethod
    def from_toml(cls, text: str, origin: str = "<string>") -> "Plan":
        """A plan from TOML text."""
        p = cls.__new__(cls)
        p._plan = _quiver._Plan.from_toml(text, origin)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Plan":
        """A plan from a TOML file."""
        p = cls.__new__(cls)
        p._plan = _quiver._Plan.from_file(os.fspath(path))
        return p

    def add(self, label: str, type, *, backend: str | None = None, **keys) -> "Plan":
        """Appends a step. ``type`` is a step type name (``"square"``) or a Python step
        class (a :class:`quiver.Step` subclass or a ``@polars_step`` function); ``keys``
        are its inputs (producing labels) and parameters, as in TOML. Returns the plan."""
        if isinstance(type, str):
            self._plan.add_step(label, type, backend, keys)
        else:
            module, name = register_class(type)
            self._plan.add_step(label, "python", backend or "python", {"module": module, "class": name, **keys})
        return self

    def run_settings(self, *, threads=None, batch_size=None, events=None, input=None, output=None) -> "Plan":
        """Sets ``[run]`` values of the plan (the arguments of :meth:`run` override them)."""
        self._plan.set_run(threads, batch_size, events,
                           None if input is None else os.fspath(input),
                           None if output is None else os.fspath(output))
        return self

    @property
    def labels(self) -> list[str]:
        """Step labels in plan order."""
        return self._plan.labels()

    def check(self) -> str:
        """Validates the plan completely; returns it resolved (order, inputs, backends)."""
        return self._plan.check()

    def run(self, *, events: int | None = None, threads: int | None = None, batch_size: int | None = None,
            input=None, output=None, collect: list[str] | None = None, progress: bool = False,
            first_event: int = 0) -> "Result":
        """Runs the plan and returns its products.

        ``input``: the dataset directory (default for plans that read raw data: the default
        dataset, as for ``quiver run``); its conditions reach the steps. ``first_event`` and
        ``events`` select the events ``first_event .. first_event + events`` (products keep
        the absolute event numbers).

        ``collect``: products to keep, as ``"label"`` or ``"label:type"``; ``None`` keeps every
        product, ``[]`` none. The GIL is released while the job runs; Python steps take it
        only while their Python code runs."""
        text, numbers, tables = self._plan.run(
            events, threads, batch_size,
            None if input is None else os.fspath(input),
            None if output is None else os.fspath(output),
            collect, progress, first_event)
        return Result(text, numbers, tables)

    def __repr__(self):
        return f"<quiver.Plan steps {self.labels}>"


SIDE_PRODUCTS = ("capacity_overflows",)
"""Records a step writes beside its product; a bare label never selects them (write
``label:capacity_overflows``)."""


class Result:
    """What a run returns: the summary and the collected products (``event`` column first,
    product columns shared with Rust, not copied)."""

    def __init__(self, summary: str, numbers: dict, tables):
        self.summary = summary
        """The run summary, as ``quiver run`` prints it."""
        self.numbers = dict(numbers)
        """events, batches, threads, batch_size, wall_s, gil_released, and step_s: seconds
        spent in each step (by label), summed over workers."""
        self._tables = {(label, ty): (obj, addrs) for label, ty, obj, addrs in tables}
        self._pa = {}

    def keys(self) -> list[str]:
        """Collected products as ``"label:type"``."""
        return [f"{label}:{ty}" for label, ty in self._tables]

    def _key(self, sel: str) -> tuple[str, str]:
        label, _, ty = sel.partition(":")
        found = [k for k in self._tables if k[0] == label and (not ty or k[1] == ty)]
        if not ty and len(found) > 1:
            found = [k for k in found if k[1] not in SIDE_PRODUCTS] or found
        if len(found) == 1:
            return found[0]
        if not found:
            raise KeyError(f"no collected product '{sel}' (collected: {', '.join(self.keys()) or 'none'})")
        raise KeyError(f"'{sel}' is ambiguous: {', '.join(f'{a}:{b}' for a, b in found)}; write label:type")

    def table(self, sel: str):
        """A product as a ``pyarrow.Table`` (one chunk per event batch)."""
        import pyarrow as pa

        k = self._key(sel)
        if k not in self._pa:
            self._pa[k] = pa.table(self._tables[k][0])
        return self._pa[k]

    __getitem__ = table

    def polars(self, sel: str):
        """A product as a ``polars.DataFrame`` (zero-copy: built from the Arrow data)."""
        import polars as pl

        return pl.DataFrame(self._tables[self._key(sel)][0])

    def rust_addresses(self, sel: str) -> dict[str, list[int]]:
        """For each product column, where its data buffer lives in Rust, per event batch
        (to check that pyarrow and Polars see the same memory)."""
        return dict(self._tables[self._key(sel)][1])

    def __repr__(self):
        return f"<quiver.Result {self.numbers.get('events')} events, products {self.keys()}>"
