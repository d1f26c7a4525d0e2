"""The beam spot as a per-event product in Python: a port of the Rust ``beamspot`` step
(``reco/src/steps/local.rs``, reference ``BeamSpotToPOD``).

:class:`BeamSpot` has the Rust step type's slots (none), parameters (none) and product
(``beamspot``: one row per event with the eleven float32 values of the ``BeamSpot``
condition), so a plan can swap ``type = "beamspot"`` for ``type = "python"``,
``module = "quiver.pixel"``, ``class = "BeamSpot"``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._steps import Step

#: Columns of the ``beamspot`` product and of the ``BeamSpot`` condition (float32, cm/rad).
FIELDS = (
    "x",
    "y",
    "z",
    "sigma_z",
    "beam_width_x",
    "beam_width_y",
    "dxdz",
    "dydz",
    "emittance_x",
    "emittance_y",
    "beta_star",
)

BEAMSPOT_SCHEMA = pa.schema([pa.field(n, pa.float32(), nullable=False) for n in FIELDS])


def beamspot_values(condition) -> np.ndarray:
    """The eleven float32 values of a ``BeamSpot`` condition table (1 row), in product order;
    a clear ``ValueError`` when the table is not that."""
    if condition.num_rows != 1:
        raise ValueError(f"condition 'BeamSpot': expected 1 row, got {condition.num_rows}")
    names = condition.schema.names
    out = np.empty(len(FIELDS), np.float32)
    for k, n in enumerate(FIELDS):
        if n not in names:
            raise ValueError(
                f"condition 'BeamSpot' has no column '{n}' (columns: {', '.join(names)})"
            )
        col = condition.column(n)
        if col.type != pa.float32():
            raise ValueError(
                f"condition 'BeamSpot', column '{n}': expected float32, got {col.type}"
            )
        out[k] = col.to_numpy(zero_copy_only=False)[0]
    return out


class BeamSpot(Step):
    """The beam spot of the conditions as a per-event product (one row per event) — the Rust
    ``beamspot`` step in Python, bit-identical."""

    consumes = {}
    produces = ["beamspot"]
    params = {}

    def __init__(self, params):
        super().__init__(params)
        self._values = None  # read from the first batch's conditions, the same all job

    def produce(self, batch):
        if self._values is None:
            conditions = batch.conditions
            if "BeamSpot" not in conditions:
                raise ValueError(
                    "no 'BeamSpot' condition in this job (have: "
                    f"{', '.join(sorted(conditions)) or 'none'})"
                )
            self._values = beamspot_values(conditions["BeamSpot"])
        n = batch.n_events
        cols = [pa.array(np.full(n, v, np.float32)) for v in self._values]
        batch.put(
            "beamspot",
            pa.RecordBatch.from_arrays(cols, schema=BEAMSPOT_SCHEMA),
            offsets=list(range(n + 1)),
        )
