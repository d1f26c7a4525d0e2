"""Histograms tables (``histograms.parquet``) as scikit-hep ``hist.Hist`` objects.

The ``histograms`` step writes one row per counter (schema in docs/products.md:
``histogram``, ``bin``, ``low_edge``, ``high_edge``, ``count``; bin 0 is the underflow,
1…n the bins, n+1 the overflow). :func:`to_hist` turns them into ``hist.Hist`` objects with
a ``Regular`` axis, flows included, ready for ``mplhep.histplot`` or ``h.plot()``.

Needs the ``hist`` package (``pip install 'quiver[hist]'``); it is imported only when called.
"""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = ["to_hist"]

_COLUMNS = ("histogram", "bin", "low_edge", "high_edge", "count")


def _import_hist():
    from ._optional import require

    return require("hist", extra="hist", feature="quiver.hist.to_hist")


def _columns(table: Any) -> dict[str, list]:
    """The histograms columns as Python lists, from a pyarrow Table, a Polars DataFrame or a
    Parquet path."""
    if isinstance(table, (str, os.PathLike)):
        import pyarrow.parquet as pq

        table = pq.read_table(os.fspath(table))
    if hasattr(table, "to_arrow") and not hasattr(table, "column_names"):
        table = table.to_arrow()  # Polars DataFrame
    if not hasattr(table, "column_names"):
        raise TypeError(
            "to_hist expects a pyarrow.Table, a polars.DataFrame or a Parquet path, got "
            f"{type(table).__name__}"
        )
    missing = [c for c in _COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(
            f"not a histograms table (docs/products.md): missing column(s) {', '.join(missing)}"
        )
    return {c: table.column(c).to_pylist() for c in _COLUMNS}


def _build(hist, name: str, rows: list[tuple[int, float, float, int]]):
    rows.sort()
    bins = [r[0] for r in rows]
    n = len(rows) - 2
    if n < 1 or bins != list(range(n + 2)):
        raise ValueError(
            f"histogram '{name}': counters must be 0 (underflow), 1…n, n+1 (overflow) once each; "
            f"got bins {bins}"
        )
    lo, hi = rows[1][1], rows[n][2]
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"histogram '{name}': bad range [{lo}, {hi}]")
    width = (hi - lo) / n
    for b, low, high, _ in rows[1 : n + 1]:
        if (
            abs(low - (lo + (b - 1) * width)) > 1e-6 * width
            or abs(high - (lo + b * width)) > 1e-6 * width
        ):
            raise ValueError(
                f"histogram '{name}': bin {b} [{low}, {high}] is not a regular bin of [{lo}, {hi}] "
                f"/ {n}"
            )
    h = hist.Hist(
        hist.axis.Regular(n, lo, hi, name=name, underflow=True, overflow=True),
        storage=hist.storage.Int64(),
    )
    h.view(flow=True)[...] = [r[3] for r in rows]
    return h


def to_hist(table: Any, name: str | None = None):
    """A histograms table as ``hist.Hist`` objects.

    ``table``: a ``pyarrow.Table``, a ``polars.DataFrame`` or the path of a Parquet file with
    the histograms schema. Returns the ``hist.Hist`` of histogram ``name`` (a ``Regular`` axis
    of n bins from ``min`` to ``max``, the underflow and overflow from bins 0 and n+1, integer
    counts), or, when ``name`` is None, a dict of all of them by name (in name order).

    >>> import pyarrow as pa
    >>> inf = float("inf")
    >>> t = pa.table({"histogram": ["x"] * 4, "bin": pa.array([0, 1, 2, 3], pa.uint32()),
    ...               "low_edge": [-inf, 0.0, 1.0, 2.0], "high_edge": [0.0, 1.0, 2.0, inf],
    ...               "count": pa.array([1, 5, 7, 2], pa.uint64())})
    >>> h = to_hist(t, "x")
    >>> h.values().tolist(), h.axes[0].edges.tolist(), int(h.view(flow=True)[0])
    ([5, 7], [0.0, 1.0, 2.0], 1)
    """
    hist = _import_hist()
    cols = _columns(table)
    groups: dict[str, list] = {}
    for row in zip(*(cols[c] for c in _COLUMNS)):
        groups.setdefault(row[0], []).append(row[1:])
    if name is not None:
        if name not in groups:
            raise KeyError(
                f"no histogram '{name}' in the table (has: {', '.join(sorted(groups)) or 'none'})"
            )
        return _build(hist, name, groups[name])
    return {n: _build(hist, n, groups[n]) for n in sorted(groups)}
