"""Optional dependencies: every import of a package that ``pip install quiver`` does not
bring goes through :func:`require`, so that a missing one fails with one line naming the
extra to install (``pip install 'quiver[sql]'``), never a bare ``ModuleNotFoundError``."""

from __future__ import annotations

import importlib

# Extra (pyproject.toml ``[project.optional-dependencies]``) -> what it enables.
EXTRAS = {
    "polars": "Polars DataFrames (Result.polars, quiver.open, Batch.polars, @polars_step)",
    "sql": "SQL over products with DataFusion (quiver.sql, quiver query)",
    "dask": "batch runs on a Dask cluster (quiver.dask, quiver reconstruct)",
    "hist": "histograms as hist.Hist objects (quiver.hist)",
    "awkward": "products as per-event awkward arrays (Result.awkward, quiver.awkward)",
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` to run."""


def require(module: str, *, extra: str, feature: str | None = None):
    """Imports and returns ``module``; if it is not installed, raises
    :class:`MissingExtraError` (an ``ImportError``) with one line naming the extra.

    >>> require("pyarrow", extra="polars").__name__
    'pyarrow'
    """
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra '{extra}' (known: {', '.join(EXTRAS)})")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.partition(".")[0]
        if (e.name or "").partition(".")[0] != top:
            raise  # the package is there but one of its own imports failed: show that
        what = feature or EXTRAS[extra]
        # `from None`: the traceback ends in this one line, not in importlib's.
        raise MissingExtraError(
            f"{what} needs the '{top}' package, which is not installed: pip install "
            f"'quiver[{extra}]'"
        ) from None
