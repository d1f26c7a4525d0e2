"""Products for analysts: track quality by name, and products as per-event awkward arrays.

The Rust products are left exactly as the reference makes them (``quality`` is a UInt8
code); names are added on the Python side only, as an extra column.
"""

from __future__ import annotations

from . import _quiver
from ._optional import require

QUALITY_NAMES = list(_quiver.quality_names())
"""Quality names in code order (index = code), from the Rust enum
(``quiver_reco::tracks::Quality``)."""


class Quality:
    """Track quality codes of the ``quality`` column of ``tracks``, ``track_fits`` and
    ``ntuplets`` (docs/products.md), as plain ``int`` constants so that they compare with
    numpy, awkward and Polars columns alike. Ordered: "loose or better" is
    ``quality >= Quality.loose``. The chain produces only ``bad``, ``dup`` and ``loose``;
    ``strict``, ``tight`` and ``highPurity`` exist in the reference's enum and are never set.

    >>> Quality.loose, Quality.name(1)
    (2, 'dup')
    """

    # The codes, spelled out for readers and editors; checked against the Rust enum below.
    bad = 0
    dup = 1
    loose = 2
    strict = 3
    tight = 4
    highPurity = 5

    @staticmethod
    def name(code: int) -> str:
        """The name of a quality code."""
        if not 0 <= int(code) < len(QUALITY_NAMES):
            raise ValueError(f"quality code {code} is not one of 0..{len(QUALITY_NAMES) - 1}")
        return QUALITY_NAMES[int(code)]


if [getattr(Quality, n, None) for n in QUALITY_NAMES] != list(range(len(QUALITY_NAMES))):
    raise ImportError(
        f"quiver.Quality disagrees with the extension's quality codes {QUALITY_NAMES}"
    )


# Product types with a `quality` column holding Quality codes.
QUALITY_TYPES = ("tracks", "track_fits", "ntuplets")


def quality_enum():
    """The ``polars.Enum`` of quality names (ordered as the codes, so ``>= "loose"`` works)."""
    pl = require("polars", extra="polars")
    return pl.Enum(QUALITY_NAMES)


def with_quality_name(frame, product_type: str):
    """``frame`` (a Polars DataFrame or LazyFrame) with a ``quality_name`` column (a
    ``polars.Enum`` of :data:`QUALITY_NAMES`) right after ``quality``, for products of
    :data:`QUALITY_TYPES`; other frames are returned unchanged. The integer ``quality``
    stays. A code outside 0–5 fails loudly (``replace_strict``)."""
    if product_type not in QUALITY_TYPES:
        return frame
    pl = require("polars", extra="polars")
    names = frame.collect_schema().names() if isinstance(frame, pl.LazyFrame) else frame.columns
    if "quality" not in names or "quality_name" in names:
        return frame
    name = (
        pl.col("quality")
        .replace_strict(list(range(len(QUALITY_NAMES))), QUALITY_NAMES, return_dtype=quality_enum())
        .alias("quality_name")
    )
    i = names.index("quality") + 1
    return frame.with_columns(name).select(names[:i] + ["quality_name"] + names[i:])


def _strip_unmasked(layout, **_):
    ak = require("awkward", extra="awkward")
    if isinstance(layout, ak.contents.UnmaskedArray):
        # Arrow marks every field nullable; a column without nulls needs no option type.
        return ak.transform(_strip_unmasked, layout.content, highlevel=False)
    return None


def to_awkward(table, first_event: int, n_events: int):
    """A product table (pyarrow, ``event`` column first, rows ordered by event) as an
    awkward array of ``n_events`` lists of records: entry ``i`` holds the rows of event
    ``first_event + i`` (an empty list for an event without rows), one field per product
    column (``event`` left out).

    The columns are not copied: awkward's buffers are the Arrow buffers. A table of
    several chunks (one per event batch) is first made contiguous, which copies once; the
    per-event offsets are computed from the ``event`` column (``n_events + 1`` int64)."""
    ak = require("awkward", extra="awkward")
    import numpy as np
    import pyarrow as pa

    if "event" not in table.column_names:
        raise ValueError("to_awkward needs the product's `event` column (rows ordered by event)")
    if table.num_rows == 0 or table.column("event").num_chunks != 1:
        table = table.combine_chunks()
    fields = [f for f in table.schema if f.name != "event"]
    events = np.asarray(table.column("event").chunk(0) if table.num_rows else [], dtype=np.int64)
    if events.size and (
        np.any(np.diff(events) < 0)
        or events[0] < first_event
        or events[-1] >= first_event + n_events
    ):
        raise ValueError(
            f"rows must be ordered by event, within events {first_event}..{first_event + n_events}"
        )
    offsets = np.searchsorted(
        events, np.arange(first_event, first_event + n_events + 1, dtype=np.int64), side="left"
    )
    if fields:
        arrays = [
            table.column(f.name).chunk(0) if table.num_rows else pa.array([], f.type)
            for f in fields
        ]
        struct = pa.StructArray.from_arrays(arrays, fields=[f.with_nullable(False) for f in fields])
        records = ak.from_arrow(struct, generate_bitmasks=False, highlevel=False)
        records = ak.transform(_strip_unmasked, records, highlevel=False)
    else:
        records = ak.contents.RecordArray([], [], length=table.num_rows)
    layout = ak.contents.ListOffsetArray(ak.index.Index64(offsets.astype(np.int64)), records)
    return ak.Array(layout)
