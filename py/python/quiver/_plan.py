"""Plans built or loaded from Python, run by the Rust executor."""

from __future__ import annotations

import difflib
import html
import os
import shutil
import weakref

from . import _quiver
from ._analysis import QUALITY_NAMES, to_awkward, with_quality_name
from ._errors import PlanError, QuiverError
from ._optional import require
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
    def from_toml(cls, text: str, origin: str = "<string>") -> Plan:
        """A plan from TOML text."""
        p = cls.__new__(cls)
        p._plan = _quiver._Plan.from_toml(text, origin)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        """A plan from a TOML file."""
        p = cls.__new__(cls)
        p._plan = _quiver._Plan.from_file(os.fspath(path))
        return p

    def add(self, label: str, type, *, backend: str | None = None, **keys) -> Plan:
        """Appends a step: every key a TOML ``[[step]]`` has. ``type`` is a step type name
        (``"square"``) or a Python step class (a :class:`quiver.Step` subclass or a
        ``@polars_step`` function; ``backend`` is then ``"python"``); ``keys`` are its inputs
        (producing labels, ``"label"`` or ``"label:type"``) and parameters, as in TOML. A
        key that is not a Python name goes through a dict:
        ``add("p", "python", module="m.py", **{"class": "Cube"})``. Returns the plan."""
        self._plan.add_step(label, *_step_type(type, backend, keys))
        return self

    def replace(self, label: str, type, *, backend: str | None = None, **keys) -> Plan:
        """Replaces step ``label`` in place with a step of ``type`` (a type name or a Python
        step class, as for :meth:`add`). The label stays, so the steps that consume it read
        the new step; its other keys (inputs, parameters) stay unless ``keys`` sets them, and
        ``key=None`` drops one. The backend stays unless the type changes. The plan is
        validated at once: a replacement that makes it invalid raises
        :class:`quiver.PlanError` and leaves the plan as it was. Returns the plan::

            plan.replace("hits", quiver.pixel.RecHits)      # the numpy port of rechits
        """
        self._require(label)
        self._plan.replace_step(label, *_step_type(type, backend, keys))
        return self

    def remove(self, label: str) -> Plan:
        """Removes step ``label``. Refused (:class:`quiver.PlanError`, naming them) while
        other steps consume its products: remove or replace those first. Returns the plan."""
        self._require(label)
        self._plan.remove_step(label)
        return self

    def _require(self, label: str) -> None:
        labels = self.labels
        if label not in labels:
            close = difflib.get_close_matches(label, labels, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise PlanError(
                f"step '{label}': no step of this plan has this label "
                f"({hint}its steps: {', '.join(labels) or 'none'})"
            )

    def run_settings(
        self, *, threads=None, batch_size=None, events=None, input=None, output=None
    ) -> Plan:
        """Sets ``[run]`` values of the plan (the arguments of :meth:`run` override them)."""
        self._plan.set_run(
            threads,
            batch_size,
            events,
            None if input is None else os.fspath(input),
            None if output is None else os.fspath(output),
        )
        return self

    @property
    def labels(self) -> list[str]:
        """Step labels in plan order."""
        return self._plan.labels()

    def check(self) -> str:
        """Validates the plan completely; returns it resolved (order, inputs, backends)."""
        return self._plan.check()

    def run(
        self,
        *,
        events: int | None = None,
        threads: int | None = None,
        batch_size: int | None = None,
        input=None,
        output=None,
        collect: list[str] | None = None,
        progress: bool = False,
        first_event: int = 0,
    ) -> Result:
        """Runs the plan and returns its products.

        ``input``: the dataset directory (default for plans that read raw data: the default
        dataset, as for ``quiver run``); its conditions reach the steps. ``first_event`` and
        ``events`` select the events ``first_event .. first_event + events`` (products keep
        the absolute event numbers).

        ``output``: the directory for the files the plan writes (``write_parquet``,
        ``histograms``, …); default: the plan's ``[run] output``, else a new temporary
        directory ``quiver-run-*`` (never ``./quiver-out``, unlike ``quiver run``), given
        back as ``Result.output``. A temporary directory is removed with the result (when
        it is garbage-collected, or when Python exits) unless :meth:`Result.keep` keeps it.

        ``collect``: products to keep, as ``"label"`` or ``"label:type"``; ``None`` keeps every
        product, ``[]`` none. The GIL is released while the job runs; Python steps take it
        only while their Python code runs."""
        text, numbers, tables = self._plan.run(
            events,
            threads,
            batch_size,
            None if input is None else os.fspath(input),
            None if output is None else os.fspath(output),
            collect,
            progress,
            first_event,
        )
        return Result(text, numbers, tables, first_event=first_event)

    def __repr__(self):
        return f"<quiver.Plan steps {self.labels}>"

    def _repr_html_(self) -> str:
        """The plan in a notebook: its steps resolved (order, inputs, backends), or the
        validation error."""
        try:
            body, style = self.check(), ""
        except QuiverError as e:
            body, style = str(e), " style='color:#b00'"
        return (
            f"<div><b>quiver.Plan</b>, {len(self.labels)} steps"
            f"<pre{style}>{html.escape(body)}</pre></div>"
        )


def _step_type(type, backend, keys) -> tuple:
    """(type name, backend, keys) of a step given as a type name or a Python step class."""
    if isinstance(type, str):
        return type, backend, keys
    module, name = register_class(type)
    return "python", backend or "python", {"module": module, "class": name, **keys}


SIDE_PRODUCTS = ("capacity_overflows",)
"""Records a step writes beside its product; a bare label never selects them (write
``label:capacity_overflows``)."""


class Result:
    """What a run returns: the summary and the collected products (``event`` column first,
    product columns shared with Rust, not copied)."""

    def __init__(self, summary: str, numbers: dict, tables, first_event: int = 0):
        self.summary = summary
        """The run summary, as ``quiver run`` prints it."""
        self.numbers = dict(numbers)
        """events, batches, threads, batch_size, wall_s, gil_released, step_s: seconds
        spent in each step (by label), summed over workers, and step_one_off_s: one-off work
        inside those calls (a Python step's ``__init__`` on each worker), not in step_s."""
        self._tables = {(label, ty): (obj, addrs) for label, ty, obj, addrs in tables}
        self._pa = {}
        self.first_event = first_event
        """The first event of the run (products keep absolute event numbers)."""
        self.output = self.numbers.get("output")
        """Where the run wrote its files (``write_parquet``, ``histograms``, …): ``output=``,
        else the plan's ``[run] output``, else a new temporary directory
        (``quiver-run-*``, removed with this result unless :meth:`keep` keeps it); ``None``
        when a run without an output directory wrote nothing."""
        self._cleanup = None
        if self.numbers.get("temporary_output") and self.output:
            # Runs when the result is garbage-collected, or at the latest when Python exits.
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.output, ignore_errors=True)

    def keep(self, path: str | os.PathLike | None = None) -> str | None:
        """Keeps the run's files past this result's life: moves the temporary output
        directory to ``path`` (which must not exist yet), or with no ``path`` leaves it where
        it is. Returns where the files are (``Result.output``). An output directory given
        to the run (``output=`` or ``[run] output``) is always kept; with ``path`` it is
        moved as well."""
        if self.output is None:
            raise FileNotFoundError("this run wrote no files: there is nothing to keep")
        if path is not None:
            dest = os.fspath(path)
            if os.path.lexists(dest):
                raise FileExistsError(f"cannot keep the run at '{dest}': it exists already")
            shutil.move(self.output, dest)
            self.output = self.numbers["output"] = dest
        if self._cleanup is not None:
            self._cleanup.detach()
            self._cleanup = None
        return self.output

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
            raise KeyError(
                f"no collected product '{sel}' (collected: {', '.join(self.keys()) or 'none'})"
            )
        raise KeyError(
            f"'{sel}' is ambiguous: {', '.join(f'{a}:{b}' for a, b in found)}; write label:type"
        )

    def table(self, sel: str):
        """A product as a ``pyarrow.Table`` (one chunk per event batch)."""
        import pyarrow as pa

        k = self._key(sel)
        if k not in self._pa:
            self._pa[k] = pa.table(self._tables[k][0])
        return self._pa[k]

    __getitem__ = table

    def polars(self, sel: str):
        """A product as a ``polars.DataFrame`` (zero-copy: built from the Arrow data). For
        products with a track quality (``tracks``, ``track_fits``, ``ntuplets``) a
        ``quality_name`` column (``polars.Enum``: bad, dup, loose, …) follows the integer
        ``quality``."""
        pl = require("polars", extra="polars")

        k = self._key(sel)
        return with_quality_name(pl.DataFrame(self._tables[k][0]), k[1])

    def awkward(self, sel: str):
        """A product as an awkward array with one list of records per event of the run
        (entry ``i`` is event ``first_event + i``; fields are the product's columns). The
        columns are the Arrow buffers Rust wrote, not copied, when the product has one chunk
        (a run in one batch); several batches are made contiguous first (one copy)."""
        return to_awkward(self.table(sel), self.first_event, int(self.numbers.get("events") or 0))

    def rust_addresses(self, sel: str) -> dict[str, list[int]]:
        """For each product column, where its data buffer lives in Rust, per event batch
        (to check that pyarrow and Polars see the same memory)."""
        return dict(self._tables[self._key(sel)][1])

    def __repr__(self):
        return f"<quiver.Result {self.numbers.get('events')} events, products {self.keys()}>"

    def quality_counts(self, sel: str = "tracks") -> dict[str, int]:
        """Rows of a product with a ``quality`` column by quality name, in code order
        (``{"bad": …, "dup": …, "loose": …}``; names with no row left out)."""
        import pyarrow.compute as pc

        counts = pc.value_counts(self.table(sel).column("quality")).to_pylist()
        return {
            QUALITY_NAMES[c["values"]]: c["counts"]
            for c in sorted(counts, key=lambda c: c["values"])
        }

    def _quality_html(self) -> str:
        keys = [f"{label}:{ty}" for label, ty in self._tables if ty == "tracks"]
        parts = []
        for k in keys:
            counts = self.quality_counts(k)
            parts.append(
                f"<br>{html.escape(k)} by quality: "
                + ", ".join(f"{n} {v}" for n, v in counts.items())
            )
        return "".join(parts)

    def _repr_html_(self) -> str:
        """The run in a notebook: events, threads, wall time, seconds per step, the
        collected products (rows, columns), and the full summary text folded."""
        n = self.numbers
        events, wall = n.get("events") or 0, n.get("wall_s") or 0.0
        rate = f"{events / wall:,.1f} events/s" if wall > 0 else "–"
        head = (
            f"<b>quiver.Result</b>: {events} events, {n.get('threads')} threads, "
            f"batch size {n.get('batch_size')}, {wall:.3f} s ({rate})"
        )
        steps = "".join(
            f"<tr><td>{html.escape(str(k))}</td><td>{v:.4f}</td></tr>"
            for k, v in (n.get("step_s") or {}).items()
        )
        prods = "".join(
            f"<tr><td>{html.escape(label)}:{html.escape(ty)}</td><td>{self.table(f'{label}:{ty}').num_rows}</td>"
            f"<td>{html.escape(', '.join(self.table(f'{label}:{ty}').column_names))}</td></tr>"
            for label, ty in self._tables
        )
        return (
            f"<div>{head}{self._quality_html()}"
            f"<table><tr><th>step</th><th>s (summed over threads)</th></tr>{steps}</table>"
            f"<table><tr><th>product</th><th>rows</th><th>columns</th></tr>{prods}</table>"
            f"<details><summary>summary</summary><pre>{html.escape(self.summary)}</pre></details></div>"
        )
