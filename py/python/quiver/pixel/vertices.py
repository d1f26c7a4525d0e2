"""Primary vertices from pixel tracks in numpy: a port of the Rust ``vertices`` step
(``reco/src/vertices``, itself a port of the reference ``PixelVertexFinding``).

The step :class:`Vertices` has the Rust step type's input slot (``input``: ``tracks``), its
parameters with the same defaults, and its products (``vertices``, ``track_vertices``), so a
plan can swap ``type = "vertices"`` for ``type = "python"``, ``module = "quiver.pixel"``,
``class = "Vertices"``. The products are bit for bit those of the Rust step
(``tests/python/test_py_port_vertices.py``).

How the results stay bit-identical while the work is vectorised over the whole event batch:

- every float operation is the Rust one in float32, on float32 arrays and ``np.float32``
  scalars (numpy never fuses a multiply-add, neither does Rust);
- sums the Rust code runs sequentially in track order (vertex fits, Σ pT², the split's
  two-means) are computed with ``np.add.accumulate`` along rows of a zero-padded matrix
  (one row per sum, starting from +0): ``accumulate`` is strictly sequential, whereas
  ``np.sum``/``reduceat``/``bincount`` sum pairwise or in double;
- the neighbour searches are done on all (track, window track) pairs of the 1 mm z
  histogram at once; ties are resolved as the Rust scan order does (the histogram holds a
  bin's tracks in descending track index);
- the split's two-means runs all candidate vertices in lockstep: once a vertex's groups stop
  changing, further iterations recompute the same values, so the result is that of the
  per-vertex loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._analysis import Quality
from .._steps import Step

F32 = np.float32

#: Track quality written by the track classifier that the vertex finder keeps (``loose``).
LOOSE = Quality.loose
#: Most track slots per event.
MAX_TRACKS = 32 * 1024
#: Most vertices per event.
MAX_VERTICES = 1024
#: Most selected tracks per event (capacity of the reference's clustering histogram).
MAX_SELECTED_TRACKS = 16_000
#: Vertices with this many degrees of freedom or more are never split.
MAX_SPLIT_TRACKS = 512
#: Vertex index of a selected track in a cluster too sparse to make a vertex.
IDV_NOISE = 9997
#: Vertex index of a selected track detached from its vertex by a fit's χ² cut.
IDV_DETACHED = 9999
#: Working vertex indices above this are markers, not vertices.
MARKER_LIMIT = 9990
#: z bins of 1 mm (±12.8 cm; outside tracks pile up in the edge bins).
NBINS = 256

CLUSTERIZERS = ("density", "dbscan", "iterative")

VERTICES_SCHEMA = pa.schema(
    [
        pa.field("z", pa.float32(), nullable=False),
        pa.field("weight", pa.float32(), nullable=False),
        pa.field("chi2", pa.float32(), nullable=False),
        pa.field("ndof", pa.int32(), nullable=False),
        pa.field("pt2", pa.float32(), nullable=False),
        pa.field("pt2_rank", pa.uint16(), nullable=False),
        pa.field("tracks", pa.list_(pa.field("item", pa.uint32(), nullable=False)), nullable=False),
    ]
)


class VertexError(ValueError):
    """Input the vertex finder cannot use, or a capacity exceeded (the message names the event)."""


class VertexConfig:
    """Parameters of the vertex finder, checked as the Rust ``VertexConfig::validate``.

    clusterizer: ``density`` (default), ``dbscan`` or ``iterative``; min_t: neighbours a track
    needs to seed a vertex (2); eps: largest |Δz| between neighbours, cm, in (0, 0.1] (0.07);
    errmax: largest σ(z) of a track that counts neighbours, cm (0.01); chi2max: largest
    Δz²/(σ²ᵢ+σ²ⱼ) between neighbours (9); pt_min: minimum track pT, GeV (0.5); min_hits:
    minimum hits of a selected track (4); fit_chi2_max_first / split_chi2_max /
    fit_chi2_max_final: outlier cut of the first fit (50), split threshold χ²/ndof (9),
    outlier cut of the final fit (5000). Floats are rounded to float32 as the Rust step does.
    """

    def __init__(
        self,
        clusterizer="density",
        min_t=2,
        eps=0.07,
        errmax=0.01,
        chi2max=9.0,
        pt_min=0.5,
        min_hits=4,
        fit_chi2_max_first=50.0,
        split_chi2_max=9.0,
        fit_chi2_max_final=5000.0,
    ):
        if clusterizer not in CLUSTERIZERS:
            raise VertexError(
                f"clusterizer = '{clusterizer}' is not one of {', '.join(CLUSTERIZERS)}"
            )
        self.clusterizer = clusterizer
        # The Rust step clamps the integers into the field types.
        self.min_t = int(min(max(int(min_t), 0), 2**31 - 1))
        self.min_hits = int(min(max(int(min_hits), 0), 65535))
        self.eps = F32(eps)
        self.errmax = F32(errmax)
        self.chi2max = F32(chi2max)
        self.pt_min = F32(pt_min)
        self.fit_chi2_max_first = F32(fit_chi2_max_first)
        self.split_chi2_max = F32(split_chi2_max)
        self.fit_chi2_max_final = F32(fit_chi2_max_final)
        self.validate()

    def validate(self):
        """Raises :class:`VertexError` naming the first parameter out of range."""

        def bad(what):
            raise VertexError(f"invalid vertex finder configuration: {what}")

        if not (self.eps > 0 and self.eps <= F32(0.1)):
            bad(f"eps = {self.eps} cm must be in (0, 0.1]")
        if not (np.isfinite(self.errmax) and self.errmax >= 0):
            bad(f"errmax = {self.errmax} cm must be finite and ≥ 0")
        if not (np.isfinite(self.chi2max) and self.chi2max > 0):
            bad(f"chi2max = {self.chi2max} must be finite and > 0")
        if not np.isfinite(self.pt_min):
            bad(f"pt_min = {self.pt_min} GeV must be finite")
        for name in ("fit_chi2_max_first", "split_chi2_max", "fit_chi2_max_final"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                bad(f"{name} = {v} must be finite and > 0")


# --- helpers ------------------------------------------------------------------------------


def _excl_cumsum(counts):
    """[0, c0, c0+c1, ...] (len(counts) + 1 entries, int64)."""
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _padded_rows(seg, nseg):
    """Row and column of each element in a zero-padded (nseg, 1 + max count) matrix: one row
    per segment, elements in their order, column 0 left at +0 (the start of a sum)."""
    order = np.argsort(seg, kind="stable")
    counts = np.bincount(seg, minlength=nseg)
    start = _excl_cumsum(counts)[:-1]
    s = seg[order]
    col = np.arange(len(s)) - start[s] + 1
    width = int(counts.max()) + 1 if len(s) else 1
    return order, s, col, width


def _row_sums(m):
    """Sequential float32 sums of each row of ``m`` (whose column 0 is +0), as a loop
    ``acc += v`` from +0: ``accumulate`` is strictly sequential, and adding a padding +0
    leaves a running sum unchanged (a sum started at +0 is never −0)."""
    return np.add.accumulate(m, axis=-1)[..., -1]


# --- the algorithm ------------------------------------------------------------------------


class _Selected:
    """Selected tracks of all events of a batch, in event then track order."""

    def __init__(self, rows, ev, zt, ezt2, ptt2, n_events):
        self.rows, self.ev, self.zt, self.ezt2, self.ptt2 = rows, ev, zt, ezt2, ptt2
        self.n_events = n_events
        self.counts = np.bincount(ev, minlength=n_events)
        self.off = _excl_cumsum(self.counts)


def _select(zip_, cov_zip, pt, quality, n_hits, offsets, cfg, first_event):
    """Tracks with ≥ min_hits hits, loose quality and pT ≥ pt_min, stopping in each event at
    the first slot with 0 hits (Rust ``load_tracks``); a selected track must have finite z
    and pT and a finite positive variance."""
    n_events = len(offsets) - 1
    counts = np.diff(offsets)
    if n_events and counts.max() > MAX_TRACKS:
        e = int(np.argmax(counts > MAX_TRACKS))
        raise VertexError(
            f"event {first_event + e}: {counts[e]} track slots exceed the capacity of {MAX_TRACKS} "
            "per event"
        )
    ev_of_row = np.repeat(np.arange(n_events), counts)
    # Slots at or after an event's first empty slot are dropped.
    zeros = np.concatenate(([0], np.cumsum(n_hits == 0)))
    alive = zeros[1:] == zeros[offsets[:-1]][ev_of_row]
    nh = n_hits.astype(np.int32)
    # `~(pt < pt_min)` as the Rust: a NaN pT is selected, then refused below.
    sel = alive & (nh >= cfg.min_hits) & (quality == LOOSE) & ~(pt < cfg.pt_min)
    rows = np.flatnonzero(sel)
    zt, ezt2, pts = zip_[rows], cov_zip[rows], pt[rows]
    bad = ~np.isfinite(pts) | ~np.isfinite(zt) | ~(np.isfinite(ezt2) & (ezt2 > 0))
    if bad.any():
        k = int(np.argmax(bad))
        r = int(rows[k])
        e = int(ev_of_row[r])
        local = r - int(offsets[e])
        if not np.isfinite(pts[k]):
            what = f"pt = {pts[k]} is not finite"
        elif not np.isfinite(zt[k]):
            what = f"zip = {zt[k]} is not finite"
        else:
            what = f"cov_zip = {ezt2[k]} is not finite and positive"
        raise VertexError(f"event {first_event + e}: track {local}: {what}")
    s = _Selected(rows, ev_of_row[rows], zt, ezt2, pts * pts, n_events)
    if n_events and s.counts.max() > MAX_SELECTED_TRACKS:
        e = int(np.argmax(s.counts > MAX_SELECTED_TRACKS))
        raise VertexError(
            f"event {first_event + e}: {s.counts[e]} selected tracks exceed the vertex histogram "
            f"capacity of {MAX_SELECTED_TRACKS}"
        )
    return s


class _Pairs:
    """The z histogram of each event and every (track, track in the bins around it) pair.

    Tracks are taken in histogram order (ascending (event, bin), and within a bin descending
    track index, the order the Rust scans a window in): position p holds track ``bins[p]``.
    Pairs are grouped by owner position ``p`` (ascending) and within an owner by partner
    position ``q`` (ascending), so that per-owner reductions are ``reduceat``s over
    ``start``, and each pair's cuts are computed once for all clusterings."""

    def __init__(self, s: _Selected, cfg: VertexConfig):
        n = len(s.zt)
        self.n = n
        # Bin: truncation toward zero of z·10 in double, clamped to the i8 range, + 128.
        b = np.clip(np.trunc(s.zt.astype(np.float64) * 10.0), -128, 127).astype(np.int64) + 128
        key = s.ev * NBINS + b
        self.bins = bins = (n - 1) - np.argsort(key[::-1], kind="stable")
        off = _excl_cumsum(np.bincount(key, minlength=s.n_events * NBINS))
        kb, bb = key[bins], b[bins]
        ws = off[kb - bb + np.maximum(bb - 1, 0)]
        we = off[kb - bb + np.minimum(bb + 1, NBINS - 1) + 1]
        length = we - ws  # ≥ 1: a track's own bin is in its window
        self.start = _excl_cumsum(length)[:-1]
        self.length = length
        # int32 pair arrays: half the memory traffic of int64 (positions are < 2**31).
        self.q = np.arange(int(length.sum()), dtype=np.int32)
        self.q -= np.repeat((self.start - ws).astype(np.int32), length)
        self.zs, self.es = s.zt[bins], s.ezt2[bins]
        self.zi = np.repeat(self.zs, length)
        self.zj = self.zs.take(self.q)  # take: several times faster than [] here
        self.dist = np.abs(self.zi - self.zj)
        self.near = self.dist <= cfg.eps
        # Δz² ≤ chi2max·(σ²ᵢ+σ²ⱼ), each operation in float32 as the Rust.
        lim = np.repeat(self.es, length)
        lim += self.es.take(self.q)
        lim *= cfg.chi2max
        self.chi2ok = np.square(self.dist) <= lim
        self.near_chi2 = self.near & self.chi2ok

    def owner(self, per_position):
        """A per-position array spread over the pairs (the owner's value)."""
        return np.repeat(per_position, self.length)

    def count(self, ok, es, cfg):
        """Per position: pairs passing ``ok`` minus the track itself, for tracks with
        σ² ≤ errmax² (0 for the others): the Rust ``count_neighbours``."""
        nn = np.add.reduceat(ok, self.start, dtype=np.int32) - 1  # exact: integers
        nn[es > cfg.errmax * cfg.errmax] = 0
        return nn

    def best(self, ok, primary, last):
        """Per position: the partner position among pairs passing ``ok`` with the smallest
        ``primary`` (a non-negative float32, or an int32 order key) — on ties the last
        partner in window order when ``last``, else the first — or −1 when none passes."""
        # Only the passing pairs (still grouped by owner), each as one int64: the key
        # (offset to non-negative) in the high bits, the tie order in the low 24 (positions
        # are < 2**24: a chunk holds at most max(CHUNK_SLOTS, MAX_TRACKS) track slots).
        idx = np.flatnonzero(ok)
        out = np.full(self.n, -1, np.int64)
        if len(idx) == 0:
            return out
        counts = np.add.reduceat(ok, self.start, dtype=np.int64)
        q = self.q.take(idx)
        k = (primary.take(idx).view(np.int32).astype(np.int64) + 2**31) << 24
        k |= (self.n - q) if last else q
        # A sentinel at the end keeps every start a valid index (trailing empty groups).
        k = np.append(k, np.iinfo(np.int64).max)
        m = np.minimum.reduceat(k, _excl_cumsum(counts)[:-1])
        low = m & 0xFFFFFF
        has = counts > 0
        out[has] = ((self.n - low) if last else low)[has]
        return out


def _order_key(z):
    """int32 keys ordered as the float32 values (−0 and +0 equal, as Rust's `<`)."""
    u = (z + F32(0.0)).view(np.int32)
    return u ^ ((u >> 31) & np.int32(0x7FFFFFFF))


def _percolate(iv):
    """Each track's root (``iv[m] == m``) by pointer jumping; the graphs are acyclic."""
    while True:
        nxt = iv[iv]
        if np.array_equal(nxt, iv):
            return iv
        iv = nxt


def _attach_edges(w, nn, iv, cfg):
    """Non-core tracks join the nearest core in their window, the last one at the minimal
    distance as the Rust's running ``dist <= mdist`` scan (positions throughout)."""
    core = nn >= cfg.min_t
    cand = w.owner(~core) & core.take(w.q) & w.near_chi2
    best = w.best(cand, w.dist, last=True)
    has = best >= 0
    iv = iv.copy()
    iv[has] = iv[best[has]]
    return iv


def _cluster(s, cfg, first_event):
    """Proto-vertex index per selected track (0.. per event, or IDV_NOISE) and the number of
    proto-vertices per event. Works on histogram positions, returns per track."""
    w = _Pairs(s, cfg)
    n = w.n
    if cfg.clusterizer == "density":
        nn = w.count(w.near_chi2, w.es, cfg)
        ni, nj = w.owner(nn), nn.take(w.q)
        # Denser: more neighbours, or as many and a smaller z (excludes the track itself).
        denser = (nj > ni) | ((nj == ni) & (w.zj < w.zi))
        best = w.best(denser & w.near_chi2, w.dist, last=True)
        iv = np.arange(n)
        has = best >= 0
        iv[has] = best[has]
        iv = _percolate(iv)
    elif cfg.clusterizer == "dbscan":
        nn = w.count(w.near, w.es, cfg)
        core = nn >= cfg.min_t
        # A core points to the lowest-z core within eps, the first one in window order on ties.
        ok = w.owner(core) & core.take(w.q) & (w.zj < w.zi) & w.near
        best = w.best(ok, _order_key(w.zj), last=False)
        iv = np.arange(n)
        has = best >= 0
        iv[has] = best[has]
        iv = _attach_edges(w, nn, _percolate(iv), cfg)
    else:  # iterative
        nn = w.count(w.near_chi2, w.es, cfg)
        core = nn >= cfg.min_t
        # The Rust passes converge to: connected cores share the smallest track index
        # (labels only decrease and only travel along edges); computed in track space.
        e = w.owner(core) & core.take(w.q) & w.near_chi2
        ta = w.bins[np.repeat(np.arange(n), w.length)[e]]
        tb = w.bins.take(w.q[e])
        lab = np.arange(n)
        while True:
            new = lab.copy()
            np.minimum.at(new, ta, lab[tb])
            new = _percolate(new)
            if np.array_equal(new, lab):
                break
            lab = new
        # Per position: the position of its track's label.
        iv = _inverse(w.bins)[lab[w.bins]]
        iv = _attach_edges(w, nn, iv, cfg)
    # Back to tracks: per track, the track its position points to.
    inv = _inverse(w.bins)
    iv_t = w.bins[iv[inv]]
    return _number_clusters(s, iv_t, nn[inv], cfg, first_event)


def _inverse(perm):
    out = np.empty_like(perm)
    out[perm] = np.arange(len(perm))
    return out


def _number_clusters(s, iv, nn, cfg, first_event):
    """Roots with ≥ min_t neighbours numbered 0, 1, … per event in track order; the others'
    trees are noise."""
    n = len(s.zt)
    root = iv == np.arange(n)
    good = root & (nn >= cfg.min_t)
    found = np.bincount(s.ev[good], minlength=s.n_events)
    if s.n_events and found.max() >= MAX_VERTICES:
        e = int(np.argmax(found >= MAX_VERTICES))
        raise VertexError(
            f"event {first_event + e}: {found[e]} vertices exceed the capacity of "
            f"{MAX_VERTICES - 1} per event"
        )
    gc = np.concatenate(([0], np.cumsum(good)))
    label = np.where(good, gc[1:] - 1 - gc[s.off[:-1]][s.ev], IDV_NOISE)
    return label[iv].astype(np.int64), found.astype(np.int64)


class _Layout:
    """Elements grouped into segments, for sequential per-segment sums (see
    :func:`_row_sums`); the grouping is computed once for several sums."""

    def __init__(self, seg, nseg):
        self.nseg = nseg
        self.order, self.row, self.col, self.width = _padded_rows(seg, nseg)

    def sums(self, *values, keep=None):
        """Sequential float32 sums per segment of each array of ``values`` (elements where
        ``keep`` is False count as +0, which leaves a sum unchanged)."""
        m = np.zeros((len(values), self.nseg, self.width), F32)
        for k, v in enumerate(values):
            v = v[self.order] if keep is None else np.where(keep, v, F32(0.0))[self.order]
            m[k, self.row, self.col] = v
        return _row_sums(m)


class _Fit:
    """Per-vertex fit results over all events (vertex v of event e at ``vbase[e] + v``)."""


def _fit(s, iv, nv, chi2_max):
    """Weighted mean z of each vertex's tracks (weights 1/σ²), then tracks with
    (z_v − z_t)²/σ² > chi2_max are detached (``iv`` set to IDV_DETACHED in place); χ², ndof
    of the others, weight scaled by ndof/χ² when ndof > 0 (Rust ``fit_vertices``)."""
    f = _Fit()
    f.vbase = _excl_cumsum(nv)
    nvt = int(f.vbase[-1])
    a = np.flatnonzero(iv <= MARKER_LIMIT)
    g = f.vbase[s.ev[a]] + iv[a]
    zt, ezt2 = s.zt[a], s.ezt2[a]
    w = F32(1.0) / ezt2
    lay = _Layout(g, nvt)
    with np.errstate(divide="ignore", invalid="ignore"):
        zv, wv = lay.sums(zt * w, w)
        zv = zv / wv  # a vertex without tracks gets 0/0 = NaN, as the Rust
        d = zv[g] - zt
        c2 = d * (d / ezt2)
        detach = c2 > chi2_max
        iv[a[detach]] = IDV_DETACHED
        keep = ~detach
        (chi2,) = lay.sums(c2, keep=keep)
        ndof = (np.bincount(g[keep], minlength=nvt) - 1).astype(np.int32)
        p = ndof > 0
        wv[p] = wv[p] * (ndof[p].astype(F32) / chi2[p])
    f.zv, f.wv, f.chi2, f.ndof = zv, wv, chi2, ndof
    f.layout, f.a, f.keep = lay, a, keep
    return f


def _split(s, iv, nv, f, cfg, first_event):
    """Vertices with 4 ≤ ndof < 512 and χ² ≥ split_chi2_max·ndof are split in two by a
    two-means in z (≤ 20 iterations); if the halves are apart by Δz²/(1/w₀+1/w₁) ≥ 4, the
    tracks of the second go to a new vertex numbered after the event's vertices (Rust
    ``split_vertices``). Updates ``iv`` in place; returns the new vertex counts."""
    ndof = f.ndof
    cand = (
        (ndof >= 4) & ~(f.chi2 < cfg.split_chi2_max * ndof.astype(F32)) & (ndof < MAX_SPLIT_TRACKS)
    )
    cv = np.flatnonzero(cand)
    if len(cv) == 0:
        return nv
    # Tracks of the candidates (still attached after the first fit), in track order.
    a = np.flatnonzero(iv <= MARKER_LIMIT)
    g = f.vbase[s.ev[a]] + iv[a]
    row_of = np.full(len(f.zv), -1, np.int64)
    row_of[cv] = np.arange(len(cv))
    mine = row_of[g] >= 0
    trk = a[mine]
    rows = row_of[g[mine]]
    order, r, col, width = _padded_rows(rows, len(cv))
    trk = trk[order]
    shape = (len(cv), width)
    valid = np.zeros(shape, bool)
    valid[r, col] = True
    zz = np.zeros(shape, F32)
    zz[r, col] = s.zt[trk] - f.zv[cv][r]
    ww = np.zeros(shape, F32)
    ww[r, col] = F32(1.0) / s.ezt2[trk]
    zw = zz * ww
    zero = F32(0.0)
    new_v = np.where(zz < 0, 0, 1).astype(np.int8)  # NaN-safe as the Rust: NaN goes to 1
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(20):
            g0 = valid & (new_v == 0)
            g1 = valid & (new_v == 1)
            z0 = _row_sums(np.where(g0, zw, zero))
            w0 = _row_sums(np.where(g0, ww, zero))
            z1 = _row_sums(np.where(g1, zw, zero))
            w1 = _row_sums(np.where(g1, ww, zero))
            z0 = z0 / w0
            z1 = z1 / w1
            d0 = np.abs(zz - z0[:, None])
            d1 = np.abs(zz - z1[:, None])
            nxt = np.where(d0 < d1, 0, 1).astype(np.int8)
            changed = ((nxt != new_v) & valid).any()
            new_v = nxt
            if not changed:
                break
        dz = z0 - z1
        dist2 = dz * dz
        chi2_dist = dist2 / (F32(1.0) / w0 + F32(1.0) / w1)
    # `~(x < 4)` as the Rust: a NaN distance splits.
    split = (w0 != 0) & (w1 != 0) & ~(chi2_dist < F32(4.0))
    if not split.any():
        return nv
    sv = cv[split]
    ev_v = np.searchsorted(f.vbase, sv, side="right") - 1
    per_event = np.bincount(ev_v, minlength=len(nv))
    rank = np.arange(len(sv)) - _excl_cumsum(per_event)[:-1][ev_v]
    igv = nv[ev_v] + rank
    if (igv >= MAX_VERTICES).any():
        k = int(np.argmax(igv >= MAX_VERTICES))
        raise VertexError(
            f"event {first_event + int(ev_v[k])}: {int(igv[k]) + 1} vertices exceed the capacity "
            f"of {MAX_VERTICES} per event"
        )
    srow = np.flatnonzero(split)
    target = np.full(len(cv), -1, np.int64)
    target[srow] = igv
    move = valid & (new_v == 1) & (target[:, None] >= 0)
    rr, cc = np.nonzero(move)
    # Map matrix cells back to tracks.
    cell_track = np.full(shape, -1, np.int64)
    cell_track[r, col] = trk
    iv[cell_track[rr, cc]] = target[rr]
    return nv + per_event


def find_vertices(
    zip_, cov_zip, pt, quality, n_hits, offsets, cfg: VertexConfig | None = None, first_event=0
):
    """Finds the primary vertices of a batch of events (Rust ``find_vertices`` per event).

    Inputs are flat per-track arrays of all events (``zip`` cm, ``cov_zip`` = σ²(zip) cm²,
    ``pt`` GeV float32; ``quality``, ``n_hits`` uint8) and ``offsets`` (n_events + 1). Returns
    a dict: per vertex ``z``, ``weight``, ``chi2``, ``ndof``, ``pt2``, ``pt2_rank`` (0 = largest
    Σ pT²), ``track_offsets`` / ``track_indices`` (the attached tracks, event-local slot
    indices, ascending) and ``vertex_offsets`` (n_events + 1); per track slot ``idv``
    (vertex index, 9997 noise, 9999 detached, −1 unassigned).

    Events are processed in chunks of about ``CHUNK_SLOTS`` track slots: the per-pair arrays
    of a chunk stay in cache (a whole 100-event batch at once is several times slower)."""
    cfg = cfg or VertexConfig()
    offsets = np.asarray(offsets, np.int64)
    zip_ = np.asarray(zip_, F32)
    cov_zip = np.asarray(cov_zip, F32)
    pt = np.asarray(pt, F32)
    quality = np.asarray(quality, np.uint8)
    n_hits = np.asarray(n_hits)
    n_events = len(offsets) - 1
    parts, e = [], 0
    while e < n_events or not parts:
        # At least one event per chunk, then as many as fit in CHUNK_SLOTS.
        stop = max(e + 1, int(np.searchsorted(offsets, offsets[e] + CHUNK_SLOTS, side="right")) - 1)
        stop = min(stop, n_events)
        a, b = offsets[e], offsets[stop]
        parts.append(
            _find_chunk(
                zip_[a:b],
                cov_zip[a:b],
                pt[a:b],
                quality[a:b],
                n_hits[a:b],
                offsets[e : stop + 1] - a,
                cfg,
                first_event + e,
            )
        )
        e = stop
    if len(parts) == 1:
        return parts[0]
    out = {
        k: np.concatenate([p[k] for p in parts])
        for k in ("z", "weight", "chi2", "ndof", "pt2", "pt2_rank", "track_indices", "idv")
    }
    for k in ("vertex_offsets", "track_offsets"):
        base = np.cumsum([0] + [p[k][-1] for p in parts[:-1]])
        out[k] = np.concatenate([parts[0][k][:1]] + [p[k][1:] + b for p, b in zip(parts, base)])
    return out


#: Track slots per chunk of events in :func:`find_vertices`.
CHUNK_SLOTS = 32768


def _find_chunk(zip_, cov_zip, pt, quality, n_hits, offsets, cfg, first_event):
    """:func:`find_vertices` on one chunk of events."""
    n_events = len(offsets) - 1
    s = _select(zip_, cov_zip, pt, quality, n_hits, offsets, cfg, first_event)
    if len(s.zt):
        iv, nv = _cluster(s, cfg, first_event)
    else:
        iv, nv = np.zeros(0, np.int64), np.zeros(n_events, np.int64)
    f = _fit(s, iv, nv, cfg.fit_chi2_max_first)
    nv = _split(s, iv, nv, f, cfg, first_event)
    f = _fit(s, iv, nv, cfg.fit_chi2_max_final)
    vbase = f.vbase
    nvt = int(vbase[-1])
    # Σ pT² of the tracks still attached after the final fit, on that fit's grouping.
    (ptv2,) = f.layout.sums(s.ptt2[f.a], keep=f.keep)
    attached = iv <= MARKER_LIMIT
    tg = vbase[s.ev[attached]] + iv[attached]
    # Ascending Σ pT² per event, ties by vertex index; rank 0 = largest.
    vev = np.repeat(np.arange(n_events), nv)
    order = np.lexsort((ptv2, vev))
    rank = np.empty(nvt, np.uint16)
    rank[order] = (vbase[1:][vev[order]] - 1 - np.arange(nvt)).astype(np.uint16)
    # Per track slot: the vertex index, only in events with a vertex (as the reference).
    idv = np.full(len(zip_), -1, np.int16)
    with_v = nv[s.ev] > 0
    idv[s.rows[with_v]] = iv[with_v]
    trows = s.rows[attached]
    # Rows are in ascending order, so a stable sort by vertex keeps tracks ascending.
    torder = np.argsort(tg, kind="stable")
    track_indices = (trows[torder] - offsets[s.ev[attached][torder]]).astype(np.uint32)
    track_offsets = _excl_cumsum(np.bincount(tg, minlength=nvt))
    return {
        "z": f.zv,
        "weight": f.wv,
        "chi2": f.chi2,
        "ndof": f.ndof,
        "pt2": ptv2,
        "pt2_rank": rank,
        "track_offsets": track_offsets,
        "track_indices": track_indices,
        "vertex_offsets": vbase,
        "idv": idv,
    }


def _column(rb, name, dtype, product="tracks"):
    col = rb.column(name) if name in rb.schema.names else None
    if col is None:
        raise VertexError(f"product '{product}' has no column '{name}'")
    a = col.to_numpy(zero_copy_only=False)
    if a.dtype != dtype:
        raise VertexError(
            f"product '{product}': column '{name}' holds {col.type}, expected "
            f"{np.dtype(dtype).name}"
        )
    return a


class Vertices(Step):
    """Primary vertices from pixel tracks: density clustering of track z0, fit, split,
    refit, sort by Σ pT² — the Rust ``vertices`` step in numpy, same slots, parameters and
    bit-identical products."""

    consumes = {"input": "tracks"}
    produces = ["vertices", "track_vertices"]
    params = {
        "clusterizer": ("density", "track clustering in z: density, dbscan or iterative"),
        "min_t": (2, "minimum neighbours for a seed (nn ≥ min_t)"),
        "eps": (0.07, "maximum |Δz| between neighbours, cm"),
        "errmax": (0.01, "maximum σ(z) of a track that seeds, cm"),
        "chi2max": (9.0, "maximum Δz²/σ² between neighbours"),
        "pt_min": (0.5, "minimum track pT, GeV"),
        "min_hits": (4, "minimum hits of a track"),
    }

    def __init__(self, params):
        super().__init__(params)
        p = {k: (v[0] if isinstance(v, tuple) else v) for k, v in type(self).params.items()}
        p.update(self.params)
        self.cfg = VertexConfig(**p)

    def produce(self, batch):
        t = batch.get("input", event=False)
        offsets = batch.offsets("input").to_numpy()
        zip_ = _column(t, "zip", np.float32)
        pt = _column(t, "pt", np.float32)
        quality = _column(t, "quality", np.uint8)
        n_hits = _column(t, "n_hits", np.uint8)
        cov = t.column("covariance") if "covariance" in t.schema.names else None
        if cov is None:
            raise VertexError("product 'tracks' has no column 'covariance'")
        if not pa.types.is_fixed_size_list(cov.type) or cov.type.value_type != pa.float32():
            raise VertexError(
                f"product 'tracks': column 'covariance' is {cov.type}, expected a fixed-size list "
                "of Float32"
            )
        if cov.type.list_size != 15:
            raise VertexError(
                f"product 'tracks': covariance has {cov.type.list_size} terms, expected 15"
            )
        # The child values by position (``flatten()`` can copy: ~10x slower here).
        cov_zip = cov.values.slice(cov.offset * 15, len(cov) * 15).to_numpy().reshape(-1, 15)[:, 14]
        v = find_vertices(zip_, cov_zip, pt, quality, n_hits, offsets, self.cfg, batch.first_event)
        tracks = pa.ListArray.from_arrays(
            pa.array(v["track_offsets"].astype(np.int32)),
            pa.array(v["track_indices"]),
            type=VERTICES_SCHEMA.field("tracks").type,
        )
        cols = [pa.array(v[k]) for k in ("z", "weight", "chi2", "ndof", "pt2", "pt2_rank")] + [
            tracks
        ]
        batch.put(
            "vertices",
            pa.RecordBatch.from_arrays(cols, schema=VERTICES_SCHEMA),
            offsets=v["vertex_offsets"].tolist(),
        )
        batch.put("track_vertices", pa.record_batch({"vertex": v["idv"]}), offsets="input")
