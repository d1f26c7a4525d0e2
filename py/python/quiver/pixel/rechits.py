"""Rec hits ("CPE fast") in numpy: a port of the Rust ``rechits`` step
(``reco/src/local/rechits.rs``, ``reco/src/steps/local.rs``), bit for bit.

Same inputs, parameters and products as the Rust step type, so a plan swaps
``type = "rechits"`` for ``type = "python", module = "quiver.pixel", class = "RecHits"``.

No Python loop runs per cluster or per digi: every digi gets the hit slot of its cluster
(or none) with a few table lookups per event, then per-cluster extremes come from
``np.minimum.at``/``np.maximum.at`` and the charge sums from ``np.bincount`` on exact
integers (so the order of the additions cannot matter), over groups of events of about
``CHUNK_DIGIS`` digis; the positions are float32 numpy arithmetic in the Rust order (numpy
never fuses a multiply-add, nor does the Rust). An event whose module runs are irregular (a
module in two runs, or a run that does not cover its module's digis; ``clusterize`` makes
neither) takes an exact, slower path that follows the Rust loop over runs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._steps import Step

# --- constants of the Rust code ------------------------------------------------------------
# datasets/src/topology.rs
NUM_ROWS_IN_MODULE = 160
NUM_COLS_IN_MODULE = 416
NUM_COLS_IN_ROC = 52
X_OFFSET = -81
Y_OFFSET = -216
LAYER_START = np.array([0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856], dtype=np.int64)
NUMBER_OF_LAYERS = 10
# reco/src/local/mod.rs
INVALID_MODULE = 9999
MAX_NUM_MODULES = 2000
MAX_CLUSTERS_PER_MODULE = 1024
MAX_NUM_CLUSTERS = 48 * 1024

F32 = np.float32
# reco/src/local/atan2.rs: the int16 atan2 polynomial (coefficients are exact float32 values)
_P0 = F32(-10422.177734375)
_P1 = F32(3349.97412109375)
_P2 = F32(-1525.589599609375)
_P3 = F32(406.64190673828125)

# The digi charge sums of one cluster edge are packed two per float64 (low + high * 2^25):
# each is below 2^25 when the cluster's total charge is, and the packed sum is then an
# exact integer (< 2^50), whatever the summation order.
_PACK_BITS = 25
_PACK = 1 << _PACK_BITS

_HIT_COLUMNS = [
    ("x_local", np.float32),
    ("y_local", np.float32),
    ("xerr_local", np.float32),
    ("yerr_local", np.float32),
    ("x_global", np.float32),
    ("y_global", np.float32),
    ("z_global", np.float32),
    ("r_global", np.float32),
    ("iphi", np.int16),
    ("charge", np.int32),
    ("size_x", np.int16),
    ("size_y", np.int16),
    ("det_index", np.uint16),
]


class RecHitsError(ValueError):
    """Inconsistent inputs of the rec hits (the Python counterpart of the Rust ``LocalError``)."""


# --- pure functions -------------------------------------------------------------------------


def local_x(px):
    """Lower edge of row ``px`` in pitch units, the big rows 79/80 counted twice (int32)."""
    px = px.astype(np.int32)
    return px + (px > 79) + (px > 80)


def local_y(py):
    """Lower edge of column ``py`` in pitch units, the big first/last column of every ROC
    counted twice (int32)."""
    py = py.astype(np.int32)
    return py + 2 * (py // NUM_COLS_IN_ROC) + (py % NUM_COLS_IN_ROC > 0)


def is_big_pix_x(px):
    """True for the double-width rows 79 and 80."""
    return (px == 79) | (px == 80)


def is_big_pix_y(py):
    """True for the double-width first and last column of every ROC."""
    c = py % NUM_COLS_IN_ROC
    return (c == 0) | (c == NUM_COLS_IN_ROC - 1)


# Lookup tables of the above over every row/column (and one past: the inner edge of the last).
_LOCAL = (local_x(np.arange(NUM_ROWS_IN_MODULE + 1)), local_y(np.arange(NUM_COLS_IN_MODULE + 1)))
_BIG = (is_big_pix_x(np.arange(NUM_ROWS_IN_MODULE)), is_big_pix_y(np.arange(NUM_COLS_IN_MODULE)))


def _saturate(v, lo, hi):
    """Rust ``float as int``: truncation toward zero, saturating, NaN -> 0 (as int64)."""
    if v.size == 0 or (v.min() >= lo and v.max() <= hi):  # NaN fails both comparisons
        return v.astype(np.int64)
    v = np.where(np.isnan(v), 0, np.clip(v, lo, hi))
    return np.trunc(v).astype(np.int64)


def unsafe_atan2s(y, x):
    """``atan2(y, x)`` as an int16 angle, π ↔ 32768 (``reco/src/local/atan2.rs``), float32 in,
    int16 out, bit for bit."""
    y = np.asarray(y, dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    ax, ay = np.abs(x), np.abs(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (ax - ay) / (ax + ay)
    r = np.where(x < 0, -r, r)
    z = r * r
    p = r * (_P0 + z * (_P1 + z * (_P2 + z * _P3)))
    # float -> i16 saturates; the sum with the base wraps like a short.
    angle = (np.where(x >= 0, 8192, 24576) + _saturate(p, -32768, 32767)).astype(np.int16)
    return np.where(y < 0, -angle, angle).astype(np.int16)


def hits_module_start(
    n_clusters_in_module, max_per_module=MAX_CLUSTERS_PER_MODULE, max_hits=MAX_NUM_CLUSTERS
):
    """``fillHitsModuleStart`` (``reco/src/local/charge_cut.rs``) of each row of a
    (events, 2000) array of cluster counts: ``[0, cumsum(min(n, max_per_module))]`` capped at
    ``max_hits`` (int64, shape (events, 2001))."""
    n = np.minimum(np.asarray(n_clusters_in_module, dtype=np.int64), max_per_module)
    out = np.zeros(n.shape[:-1] + (n.shape[-1] + 1,), dtype=np.int64)
    np.cumsum(n, axis=-1, out=out[..., 1:])
    return np.minimum(out, max_hits)


def _unbalance(q_f, q_l):
    """``8·|Q_f − Q_l|/(Q_f + Q_l)`` in double, truncated (int32 in, int32 out)."""
    a = np.abs((q_f - q_l).astype(np.float32)).astype(np.float64)
    b = (q_f + q_l).astype(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = 8.0 * a / b
    return _saturate(v, -2147483648, 2147483647).astype(np.int32)


def _correction(
    size_m1,
    q_f,
    q_l,
    upper_edge_first,
    lower_edge_last,
    lorentz_shift,
    thickness,
    cot_angle,
    pitch,
    first_big,
    last_big,
):
    """Charge-sharing correction of one projection, float32 in the Rust order."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        w_inner = pitch * (lower_edge_last - upper_edge_first).astype(np.float32)
        w_pred = thickness * cot_angle - lorentz_shift
        w_two = np.abs(w_pred) - w_inner
        simple = (size_m1 != 1) | (w_two < 0) | (w_two > pitch)
        sum_of_edge = F32(2.0) + first_big.astype(np.float32) + last_big.astype(np.float32)
        w_eff = np.where(simple, pitch * F32(0.5) * sum_of_edge, w_two)
        q_diff = (q_l - q_f).astype(np.float32)
        q_sum = (q_l + q_f).astype(np.float32)
        q_sum = np.where(q_sum == 0, F32(1.0), q_sum)
        corr = F32(0.5) * (q_diff / q_sum) * w_eff
    return np.where(size_m1 == 0, F32(0.0), corr)


class Cpe:
    """The CPE conditions as numpy arrays (from the ``CpeParams.*`` condition tables), with the
    per-module quantities the hits need derived once (each exactly as the Rust computes it)."""

    def __init__(self, common: pa.RecordBatch, det: pa.RecordBatch):
        def column(table, what, name, dtype):
            try:
                a = table.column(name).to_numpy(zero_copy_only=False)
            except KeyError:
                raise RecHitsError(f"condition '{what}' has no column '{name}'") from None
            if a.dtype != dtype:  # a silent conversion could change the hits
                raise RecHitsError(
                    f"condition '{what}', column '{name}': expected {np.dtype(dtype)}, got "
                    f"{a.dtype}"
                )
            return np.ascontiguousarray(a)

        def one(name):
            a = column(common, "CpeParams.common", name, np.float32)
            if a.size != 1:
                raise RecHitsError(f"condition 'CpeParams.common' has {a.size} rows, expected 1")
            return a[0]

        def col(name, dtype=np.float32):
            return column(det, "CpeParams.det", name, dtype)

        self.thickness_b, self.thickness_e = one("thickness_b"), one("thickness_e")
        self.pitch_x, self.pitch_y = one("pitch_x"), one("pitch_y")
        self.n_modules = det.num_rows
        self.is_barrel = col("is_barrel", bool)
        for name in (
            "shift_x",
            "shift_y",
            "charge_width_x",
            "charge_width_y",
            "z0",
            "px",
            "py",
            "pz",
            "r11",
            "r12",
            "r13",
            "r21",
            "r22",
            "r23",
        ):
            setattr(self, name, col(name))
        # Per axis (x, y) tables, (2, modules): what cluster_hits gathers for both axes at once.
        self.pitch = np.array([[self.pitch_x], [self.pitch_y]], dtype=np.float32)
        self.shift = np.stack([self.shift_x, self.shift_y])
        self.origin = np.stack([col("x0"), col("y0")])
        self.charge_width = np.stack([self.charge_width_x, self.charge_width_y])
        # Errors (2, modules, 3): [multi-pixel, single, single big]; flat index base per axis.
        self.errors = np.stack(
            [np.stack([col(f"s{a}{i}") for i in range(3)], axis=1) for a in "xy"]
        )
        self.error_base = np.array([[0], [3 * self.n_modules]], dtype=np.intp)
        self.thickness = np.where(self.is_barrel, self.thickness_b, self.thickness_e).astype(
            np.float32
        )
        with np.errstate(divide="ignore"):
            self.gvz = F32(-1.0) / self.z0

    @classmethod
    def from_conditions(cls, conditions: dict) -> Cpe:
        for name in ("CpeParams.common", "CpeParams.det"):
            if name not in conditions:
                raise RecHitsError(
                    f"condition '{name}' missing (have: {', '.join(sorted(conditions))})"
                )
        return cls(conditions["CpeParams.common"], conditions["CpeParams.det"])


# Per axis (0: x = rows, 1: y = columns): last pixel, centre offset, error of an edge cluster.
_LAST = np.array([[NUM_ROWS_IN_MODULE - 1], [NUM_COLS_IN_MODULE - 1]], dtype=np.int32)
_OFFSET = np.array([[X_OFFSET], [Y_OFFSET]], dtype=np.float32)
_EDGE_ERROR = np.array([[0.0050], [0.0085]], dtype=np.float32)


def cluster_hits(cpe: Cpe, det, lo, hi, q_f, q_l):
    """``position`` + ``errorFromDB`` + local → global of clusters with at least one pixel
    (``reco/src/local/rechits.rs``), both axes at once.

    ``det``: module detIndex per cluster; ``lo``, ``hi``: (2, n) first and last row (axis 0)
    and column (axis 1); ``q_f``, ``q_l``: (2, n) int32 charges on them. Returns a dict of
    float32/int16 columns (x, y, xerr, yerr as variances, size_x, size_y, and the global
    position before the beam-spot subtraction xg, yg, zg)."""
    det = det.astype(np.intp)
    lo, hi = lo.astype(np.int32), hi.astype(np.int32)
    ll = np.stack([_LOCAL[a].take(lo[a] + 1) for a in (0, 1)])  # inner edges of the end pixels
    ur = np.stack([_LOCAL[a].take(hi[a]) for a in (0, 1)])
    big_f = np.stack([_BIG[a].take(lo[a]) for a in (0, 1)])
    big_l = np.stack([_BIG[a].take(hi[a]) for a in (0, 1)])
    with np.errstate(over="ignore"):
        size = 8 * (ur + 2 - ll + big_f + big_l) - _unbalance(q_f, q_l)
        size = np.minimum(size, 1023).astype(np.int16)
        edge = (lo == 0) | (hi == _LAST)
        size = np.where(edge, -size, size)

    pos = cpe.shift.take(det, axis=1) + cpe.pitch * (
        F32(0.5) * (ll + ur).astype(np.float32) + _OFFSET
    )
    cot = (pos - cpe.origin.take(det, axis=1)) * cpe.gvz.take(det)
    span = hi - lo
    corr = _correction(
        span,
        q_f,
        q_l,
        ll,
        ur,
        cpe.charge_width.take(det, axis=1),
        cpe.thickness.take(det),
        cot,
        cpe.pitch,
        big_f,
        big_l,
    )
    single = span == 0
    which = single.astype(np.intp) + (single & big_f)  # [multi-pixel, single, single big]
    err = np.where(edge, _EDGE_ERROR, cpe.errors.ravel().take(cpe.error_base + det * 3 + which))
    xy = pos + corr
    x, y = xy[0], xy[1]
    xg = cpe.r11.take(det) * x + cpe.r21.take(det) * y
    yg = cpe.r12.take(det) * x + cpe.r22.take(det) * y
    zg = cpe.r13.take(det) * x + cpe.r23.take(det) * y
    xg += cpe.px.take(det)
    yg += cpe.py.take(det)
    zg += cpe.pz.take(det)
    err = err * err
    return {
        "x": x,
        "y": y,
        "xerr": err[0],
        "yerr": err[1],
        "size_x": size[0],
        "size_y": size[1],
        "xg": xg,
        "yg": yg,
        "zg": zg,
    }


# --- the step ---------------------------------------------------------------------------------


def _np(rb: pa.RecordBatch, name: str, what: str, dtype):
    try:
        a = rb.column(name)
    except KeyError:
        raise RecHitsError(f"input '{what}' has no column '{name}'") from None
    a = a.to_numpy(zero_copy_only=False)
    if a.dtype != dtype:
        raise RecHitsError(
            f"input '{what}', column '{name}': expected {np.dtype(dtype)}, got {a.dtype}"
        )
    return a


def _offsets(batch, slot):
    return np.asarray(batch.offsets(slot), dtype=np.int64)


class RecHits(Step):
    """Rec hits with the "CPE fast" positions and errors, global positions minus the beam spot,
    int16 φ; and the hit offsets per layer. A numpy port of the Rust ``rechits`` step, with the
    same inputs and products, bit for bit."""

    consumes = {
        "digis": "calibrated_digis",
        "clusters": "clustered_digis",
        "modules": "hit_modules",
        "beamspot": "beamspot",
    }
    produces = ["hits", "hit_layers"]
    params = {}

    def __init__(self, params: dict):
        super().__init__(params)
        self._cpe = None  # the conditions are the same for the whole job: converted once

    def cpe(self, batch) -> Cpe:
        if self._cpe is None:
            conditions = getattr(batch, "conditions", None)
            if conditions is None:
                raise RecHitsError(
                    "this quiver has no batch.conditions: the CPE conditions are not reachable"
                )
            self._cpe = Cpe.from_conditions(conditions)
        return self._cpe

    def produce(self, batch):
        cpe = self.cpe(batch)
        d = batch.get("digis", event=False)
        c = batch.get("clusters", event=False)
        m = batch.get("modules", event=False)
        b = batch.get("beamspot", event=False)
        d_off, c_off = _offsets(batch, "digis"), _offsets(batch, "clusters")
        if not np.array_equal(d_off, c_off):
            raise RecHitsError("inputs 'clusters' and 'digis' have different rows per event")
        out = rec_hits(
            cpe,
            row=_np(d, "row", "digis", np.uint16),
            col=_np(d, "col", "digis", np.uint16),
            charge=_np(d, "charge", "digis", np.uint16),
            module=_np(c, "module", "clusters", np.uint16),
            cluster=_np(c, "cluster", "clusters", np.int32),
            digi_offsets=d_off,
            run_module=_np(m, "module", "modules", np.uint16),
            run_first=_np(m, "first_digi", "modules", np.uint32),
            run_clusters=_np(m, "clusters", "modules", np.uint32),
            run_offsets=_offsets(batch, "modules"),
            beamspot=np.stack([_np(b, k, "beamspot", np.float32) for k in ("x", "y", "z")], axis=1),
            beamspot_offsets=_offsets(batch, "beamspot"),
            first_event=batch.first_event,
        )
        hits, hit_offsets, layer_starts = out
        batch.put("hits", pa.record_batch(hits), offsets=hit_offsets.tolist())
        n = layer_starts.shape[0]
        first = layer_starts[:, :NUMBER_OF_LAYERS]
        layers = {
            "layer": np.tile(np.arange(NUMBER_OF_LAYERS, dtype=np.uint8), n),
            "first_hit": first.astype(np.uint32).ravel(),
            "hits": np.diff(layer_starts, axis=1).astype(np.uint32).ravel(),
        }
        batch.put(
            "hit_layers",
            pa.record_batch(layers),
            offsets=list(range(0, NUMBER_OF_LAYERS * n + 1, NUMBER_OF_LAYERS)),
        )


def rec_hits(
    cpe: Cpe,
    *,
    row,
    col,
    charge,
    module,
    cluster,
    digi_offsets,
    run_module,
    run_first,
    run_clusters,
    run_offsets,
    beamspot,
    beamspot_offsets,
    first_event=0,
):
    """The rec hits of a batch of events (``rec_hits`` of ``reco/src/local/rechits.rs`` on every
    event, results concatenated).

    Digi columns (row, col, charge, module, cluster) with ``digi_offsets`` (events + 1);
    module runs (module, first digi within the event, surviving clusters) with
    ``run_offsets``; the beam spot as an (rows, 3) float32 array of x, y, z with
    ``beamspot_offsets`` (its first row of each event is used).

    Returns (dict of hit columns, hit offsets (events + 1), hitsLayerStart (events, 11)).
    Raises :class:`RecHitsError` on inconsistent inputs.
    """
    n_events = len(digi_offsets) - 1
    digi_offsets = np.asarray(digi_offsets, dtype=np.int64)
    run_offsets = np.asarray(run_offsets, dtype=np.int64)
    beamspot_offsets = np.asarray(beamspot_offsets, dtype=np.int64)

    def fail(e, msg):
        raise RecHitsError(f"event {first_event + e}: {msg}")

    # Per-event module tables (module_arrays + hits_module_start of reco/src/steps/local.rs).
    run_event = np.repeat(np.arange(n_events), np.diff(run_offsets))
    for limit, what in ((MAX_NUM_MODULES, ""), (cpe.n_modules, f" (< {cpe.n_modules} expected)")):
        if run_module.size and int(run_module.max()) >= limit:
            bad = int(np.argmax(run_module >= limit))
            fail(run_event[bad], f"module id {int(run_module[bad])} out of range{what}")
    flat_run = run_event * MAX_NUM_MODULES + run_module
    # A module in two runs of one event: the last run's count wins (as in module_arrays).
    seen = np.bincount(flat_run, minlength=n_events * MAX_NUM_MODULES).reshape(
        n_events, MAX_NUM_MODULES
    )
    irregular = (seen > 1).any(axis=1)
    last = np.full(n_events * MAX_NUM_MODULES, -1, dtype=np.int64)
    np.maximum.at(last, flat_run, np.arange(flat_run.size))
    ncl = np.zeros((n_events, MAX_NUM_MODULES), dtype=np.int64)
    has = last >= 0
    ncl.reshape(-1)[has] = run_clusters[last[has]]
    cms = hits_module_start(ncl)  # (events, 2001)
    n_digis = np.diff(digi_offsets)
    for e in np.flatnonzero(cms[:, MAX_NUM_MODULES] > n_digis):
        fail(e, f"clus_module_start spans 0..{cms[e, MAX_NUM_MODULES]} hits for {n_digis[e]} digis")
    nclus = np.minimum(ncl, np.diff(cms, axis=1))  # clusters given a hit, per module id
    n_hits = cms[:, MAX_NUM_MODULES]
    hit_offsets = np.zeros(n_events + 1, dtype=np.int64)
    np.cumsum(n_hits, out=hit_offsets[1:])
    total = int(hit_offsets[-1])

    hits = _hit_columns(total)
    if total == 0:
        return hits, hit_offsets, cms[:, LAYER_START]
    if (np.diff(beamspot_offsets) < 1).any():
        fail(int(np.argmax(np.diff(beamspot_offsets) < 1)), "no beam spot row")
    # By groups of whole events of about CHUNK_DIGIS digis: the temporaries stay small
    # (in cache, and reused by the allocator instead of fresh pages).
    lut = _Tables()
    bs = beamspot[beamspot_offsets[:-1]]
    e0 = 0
    while e0 < n_events:
        e1 = max(
            e0 + 1,
            int(np.searchsorted(digi_offsets, digi_offsets[e0] + CHUNK_DIGIS, side="right")) - 1,
        )
        e1 = min(e1, n_events)
        _chunk(
            cpe,
            hits,
            lut,
            e0,
            e1,
            row,
            col,
            charge,
            module,
            cluster,
            digi_offsets,
            run_module,
            run_first,
            run_offsets,
            irregular,
            nclus,
            cms,
            hit_offsets,
            bs,
            fail,
        )
        e0 = e1
    return hits, hit_offsets, cms[:, LAYER_START]


# Digis per group of events handled at once: small groups keep the per-digi temporaries in
# cache (fastest measured: about one event of the default dataset per group).
CHUNK_DIGIS = 1 << 16


class ClusterSums:
    """Per hit slot: ``lo``, ``hi`` (2, n) first and last row (axis 0) and column (axis 1),
    ``q_f``, ``q_l`` (2, n) int32 charge on them, ``charge`` (n) int32 total charge (the Rust
    ``ClusSums``); lo = 0xFFFF for a slot without a pixel."""

    def __init__(self, lo, hi, q_f, q_l, charge):
        self.lo, self.hi, self.q_f, self.q_l, self.charge = lo, hi, q_f, q_l, charge


class _Tables:
    """Lookup tables by module id (uint16), reused from event to event."""

    def __init__(self):
        self.n = np.zeros(1 << 16, dtype=np.uint32)  # clusters given a hit (0: none)
        self.base = np.zeros(1 << 16, dtype=np.int64)  # first hit slot in the group
        self.first = np.full(1 << 16, -1, dtype=np.int64)  # first digi of the module's run


def _chunk(
    cpe,
    hits,
    lut,
    e0,
    e1,
    row,
    col,
    charge,
    module,
    cluster,
    digi_offsets,
    run_module,
    run_first,
    run_offsets,
    irregular,
    nclus,
    cms,
    hit_offsets,
    bs,
    fail,
):
    """The hits of events e0..e1, written into their rows of ``hits``."""
    h0, h1 = int(hit_offsets[e0]), int(hit_offsets[e1])
    if h1 == h0:
        return
    g0, g1 = int(digi_offsets[e0]), int(digi_offsets[e1])
    row, col, charge = row[g0:g1], col[g0:g1], charge[g0:g1]
    # The hit slot (within the group) of every digi; digis that no cluster counts get the
    # dummy slot `total` (an extra last slot of the sums), so the sums run over the digi
    # columns as they are, without gathering.
    total = h1 - h0
    key = np.empty(g1 - g0, dtype=np.int64)
    dummy = np.int64(total)
    for e in range(e0, e1):
        d0, d1 = int(digi_offsets[e]), int(digi_offsets[e + 1])
        k = key[d0 - g0 : d1 - g0]
        base = cms[e] + (hit_offsets[e] - h0)
        if base[-1] == base[0]:  # no hits
            k[:] = dummy
            continue
        mod_e, clus_e = module[d0:d1], cluster[d0:d1]
        runs = slice(run_offsets[e], run_offsets[e + 1])
        lut.n[:MAX_NUM_MODULES] = nclus[e]
        if irregular[e] or not _runs_cover_modules(mod_e, run_module[runs], run_first[runs], lut):
            _keys_exact(k, mod_e, clus_e, run_module[runs], run_first[runs], nclus[e], base, dummy)
        else:
            lut.base[:MAX_NUM_MODULES] = base[:MAX_NUM_MODULES]
            mi = mod_e.astype(np.intp)
            np.add(lut.base.take(mi), clus_e, out=k)
            # Negative cluster numbers become huge unsigned ones: one comparison.
            k[clus_e.view(np.uint32) >= lut.n.take(mi)] = dummy
    if row.size and (int(row.max()) >= NUM_ROWS_IN_MODULE or int(col.max()) >= NUM_COLS_IN_MODULE):
        bad = (key != dummy) & ((row >= NUM_ROWS_IN_MODULE) | (col >= NUM_COLS_IN_MODULE))
        if bad.any():
            i = int(np.argmax(bad)) + g0
            e = int(np.searchsorted(digi_offsets, i, side="right")) - 1
            fail(
                e,
                f"digi {i - int(digi_offsets[e])}: pixel (row {int(row[i - g0])}, col "
                f"{int(col[i - g0])}) "
                "outside the module",
            )
    sums = _sums(key, total, row, col, charge)
    # Module id of every hit slot (slots of module m: cms[m]..cms[m+1]), beam spot of its event.
    slot_module = np.repeat(
        np.tile(np.arange(MAX_NUM_MODULES, dtype=np.uint16), e1 - e0),
        np.diff(cms[e0:e1], axis=1).ravel(),
    )
    slot_bs = np.repeat(bs[e0:e1], np.diff(hit_offsets[e0 : e1 + 1]), axis=0)
    _hits(cpe, {name: v[h0:h1] for name, v in hits.items()}, sums, slot_module, slot_bs)


def _carve(n, layout):
    """Arrays of the given (shape, dtype) carved out of one uninitialised buffer, 64-byte
    aligned: fresh memory costs a page fault per 4 KiB page, and one large allocation gets
    huge pages (numpy advises them from 4 MiB on), which made writing the hits about ten
    times cheaper (measured on the 2-core VM)."""
    offsets, size = [], 0
    for shape, t in layout:
        offsets.append(size)
        size += -(-int(np.prod(shape)) * np.dtype(t).itemsize // 64) * 64
    buf = np.empty(size, dtype=np.uint8)
    return [
        buf[o : o + int(np.prod(shape)) * np.dtype(t).itemsize].view(t).reshape(shape)
        for (shape, t), o in zip(layout, offsets)
    ]


def _hit_columns(n):
    """The hit columns, uninitialised (`_hits` writes every row), from one buffer."""
    return dict(
        zip([name for name, _ in _HIT_COLUMNS], _carve(n, [((n,), t) for _, t in _HIT_COLUMNS]))
    )


def _runs_cover_modules(mod_e, run_mod, run_first, lut):
    """True when the run of every module with hits covers all its digis (always so for the
    products of ``clusterize`` + ``cluster_charge_cut``), the run modules being distinct.

    A run covers [first, next valid digi of another module): every stretch of consecutive
    valid digis of module m (invalid digis in between allowed) must start at or after the
    run's first digi, with no valid digi of another module between the two."""
    n = mod_e.size
    if n == 0:
        return True
    starts = np.flatnonzero(
        np.concatenate(([True], mod_e[1:] != mod_e[:-1]))
    )  # runs of equal values
    ends = np.append(starts[1:], n)
    mods = mod_e[starts]
    valid = mods != INVALID_MODULE
    starts, ends, mods = starts[valid], ends[valid], mods[valid]
    if mods.size == 0:
        return True
    new = np.concatenate(([True], mods[1:] != mods[:-1]))  # merge across invalid digis
    b = np.flatnonzero(new)
    bmod, bstart = mods[b], starts[b]
    prev_end = np.concatenate(([0], ends[b[1:] - 1]))  # one past the previous valid digi
    need = lut.n.take(bmod) > 0
    lut.first[run_mod] = np.minimum(run_first.astype(np.int64), n)
    bfirst = lut.first.take(bmod)
    lut.first[run_mod] = -1
    ok = (bfirst >= prev_end) & (bfirst <= bstart)
    return bool(ok[need].all())


def _keys_exact(key, mod_e, clus_e, run_mod, run_first, nclus_e, base_e, dummy):
    """The Rust loop over module runs, for irregular events: every run counts the digis of
    its module from its first digi until a valid digi of another module; a hit slot keeps
    the sums of the last run that has pixels of its cluster. Writes the slot of every digi
    (``base_e[m]``: first slot of module m) into ``key``. Slower (a Python loop over the
    event's runs) but never taken on the products of ``clusterize`` + ``cluster_charge_cut``."""
    n = mod_e.size
    key[:] = dummy
    idx_parts, slot_parts, run_parts = [], [], []
    for r in range(run_mod.size):
        me = int(run_mod[r])
        k = int(nclus_e[me])
        if k == 0:
            continue
        first = min(int(run_first[r]), n)
        other = (mod_e[first:] != INVALID_MODULE) & (mod_e[first:] != me)
        end = first + (int(np.argmax(other)) if other.any() else n - first)
        m, cl = mod_e[first:end], clus_e[first:end]
        sel = np.flatnonzero((m == me) & (cl >= 0) & (cl < k))
        idx_parts.append(sel + first)
        slot_parts.append(base_e[me] + cl[sel].astype(np.int64))
        run_parts.append(np.full(sel.size, r, dtype=np.int64))
    if not idx_parts:
        return
    idx, slot, run = map(np.concatenate, (idx_parts, slot_parts, run_parts))
    last = np.full(int(slot.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(last, slot, run)  # the last run with pixels of the slot's cluster wins
    keep = run == last.take(slot)
    # A digi belongs to runs of its own module only: kept at most once.
    key[idx[keep]] = slot[keep]


def _sums(key, total, row, col, charge):
    """Per-cluster sums (:class:`ClusterSums`) over the digis by hit slot (``key``; slot
    ``total``: no cluster)."""
    size = total + 1
    lo = np.full((2, size), 0xFFFF, dtype=np.uint16)  # first row, column
    hi = np.zeros((2, size), dtype=np.uint16)  # last row, column
    np.minimum.at(lo[0], key, row)
    np.maximum.at(hi[0], key, row)
    np.minimum.at(lo[1], key, col)
    np.maximum.at(hi[1], key, col)
    # Integer sums as exact float64 (< 2^53): the order of the additions cannot matter; i32
    # sums wrap like the reference's atomics.
    qf = charge.astype(np.float64)
    q_tot = np.bincount(key, weights=qf, minlength=size)[:total]
    q_f = np.empty((2, total), dtype=np.int32)
    q_l = np.empty((2, total), dtype=np.int32)
    packed = q_tot.max(initial=0) < _PACK
    for axis, v in enumerate((row, col)):
        first, last = v == lo[axis].take(key), v == hi[axis].take(key)
        if packed:
            s = np.bincount(key, weights=qf * (first + last * float(_PACK)), minlength=size)[
                :total
            ].astype(np.int64)
            q_f[axis] = s & (_PACK - 1)
            q_l[axis] = s >> _PACK_BITS
        else:  # huge clusters: one exact sum per edge
            q_f[axis] = np.bincount(key, weights=qf * first, minlength=size)[:total].astype(
                np.int64
            )
            q_l[axis] = np.bincount(key, weights=qf * last, minlength=size)[:total].astype(np.int64)
    return ClusterSums(
        lo[:, :total], hi[:, :total], q_f, q_l, q_tot.astype(np.int64).astype(np.int32)
    )


def _hits(cpe, hits, sums, slot_module, slot_bs):
    """The hits of the slots with at least one pixel, written into ``hits`` (the others zero)."""
    total = sums.charge.size
    h = np.flatnonzero(sums.lo[0] != 0xFFFF)
    every = h.size == total

    def pick(v):
        return v if every else v[..., h]

    det = pick(slot_module)
    p = cluster_hits(cpe, det, pick(sums.lo), pick(sums.hi), pick(sums.q_f), pick(sums.q_l))
    bs = pick(slot_bs.T)
    xg = p["xg"] - bs[0]
    yg = p["yg"] - bs[1]
    zg = p["zg"] - bs[2]
    out = {
        "x_local": p["x"],
        "y_local": p["y"],
        "xerr_local": p["xerr"],
        "yerr_local": p["yerr"],
        "x_global": xg,
        "y_global": yg,
        "z_global": zg,
        "r_global": np.sqrt(xg * xg + yg * yg),
        "iphi": unsafe_atan2s(yg, xg),
        "charge": pick(sums.charge),
        "size_x": p["size_x"],
        "size_y": p["size_y"],
        "det_index": det,
    }
    for name, v in out.items():
        if not every:
            hits[name][:] = 0  # slots without a pixel stay zero
            hits[name][h] = v
        else:
            hits[name][:] = v
