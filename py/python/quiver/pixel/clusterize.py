"""numpy ports of the Rust steps ``clusterize`` and ``cluster_charge_cut``.

Same input slots, parameters (names and defaults) and product types as the Rust step types,
so a plan swaps ``type = "clusterize"`` for ``type = "python"``, ``module = "quiver.pixel"``,
``class = "Clusterize"`` (and ``cluster_charge_cut`` for ``class = "ChargeCut"``) with no
other change. The products are bit-for-bit those of the Rust cores
(``reco/src/local/clusterize.rs``, ``reco/src/local/charge_cut.rs``), edge cases included.

Both steps are vectorised with numpy: no Python loop per pixel, cluster or module (only per
chunk of about 64k digis, which keeps the working arrays in cache). Clustering sorts the
pixels of each chunk by (run, row, column), cuts them into horizontal segments of touching
columns, links segments of consecutive rows whose column ranges touch, and labels the
components by hooking and pointer jumping (a few vectorised rounds). Clusters are then
numbered, as the reference does, per module run in ascending lowest digi index.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .._steps import Step

INVALID_MODULE = 9999  # module index of an invalid digi (`InvId`)
MAX_NUM_MODULES = 2000  # size of the module-indexed tables; also the cap of runs per event
NUM_ROWS = 160  # pixel rows (x) of a module
NUM_COLS = 416  # pixel columns (y) of a module
INVALID_CLUS = -9999  # cluster number of an invalid digi inside a module run
REJECTED = 9999  # module and cluster number of a pixel whose cluster was dropped
L1_MODULES = 96  # modules with detIndex below this are BPix L1 (`min_charge_l1`)

# Padded cell keys: one spare row/column on every side, so the 8 neighbours of a real pixel
# never wrap into another row or another run (they fall on empty padding cells).
_W = NUM_COLS + 2
_RUN_STRIDE = (NUM_ROWS + 2) * _W


# Events are processed in chunks of about this many digis: the working arrays of one chunk
# stay in the core's cache, which makes the gathers several times faster than batch-wide.
CHUNK_DIGIS = 1 << 16


def _event_of(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Batch-local event of each row index (rows of an event are contiguous)."""
    return np.searchsorted(offsets, rows, side="right") - 1


def _chunks(offsets: np.ndarray, limit: int = CHUNK_DIGIS):
    """Event ranges [e0, e1) of about `limit` digis each (at least one event)."""
    n_ev = len(offsets) - 1
    e0 = 0
    while e0 < n_ev:
        e1 = int(np.searchsorted(offsets, offsets[e0] + limit, side="right")) - 1
        e1 = min(max(e1, e0 + 1), n_ev)
        yield e0, e1
        e0 = e1


def _cumsum(mask: np.ndarray) -> np.ndarray:
    """Inclusive prefix count of a boolean mask (int64; faster than cumsum on bools)."""
    return np.cumsum(mask.view(np.int8), dtype=np.int64)


def _positions(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``np.searchsorted(keys, queries)`` for sorted, distinct keys and sorted, distinct
    queries (both >= 0, < 2^62), by one stable merge: several times faster here."""
    both = np.concatenate((queries << 1, (keys << 1) | 1))  # a query sorts before an equal key
    both.sort(kind="stable")  # two sorted runs: a single merge
    return np.flatnonzero((both & 1) == 0) - np.arange(len(queries))


def _has_duplicates(keys: np.ndarray) -> bool:
    """Whether some key occurs twice (`np.unique` costs more on small arrays)."""
    s = np.sort(keys)
    return bool((s[1:] == s[:-1]).any())


def _last_per_key(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each row, the value of the LAST row with the same key (a table written in order)."""
    if len(keys) == 0:
        return values.copy()
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.empty(len(sk), dtype=bool)
    new[0] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    group = _cumsum(new) - 1
    last = np.append(np.flatnonzero(new)[1:], len(sk)) - 1  # last sorted position per group
    out = np.empty_like(values)
    out[order] = values[order[last[group]]]
    return out


def _components(n_cells: int, ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """Connected components of cells 0..n_cells over the edges (ea, eb): each cell's label
    is the smallest cell index of its component (hooking on the smaller label, then pointer
    jumping to the roots, until every edge joins equal labels)."""
    label = np.arange(n_cells, dtype=np.int64)
    la, lb = ea, eb  # labels of the edge ends in the first round
    while True:
        differ = np.flatnonzero(la != lb)
        if len(differ) == 0:
            return label
        # An edge whose ends share a tree stays so (trees only merge): drop it.
        ea, eb, la, lb = ea[differ], eb[differ], la[differ], lb[differ]
        # Labels are roots after jumping, so hooking the larger root under the smaller one
        # merges the two trees; label[x] <= x is kept, so the smallest index stays a root.
        np.minimum.at(label, np.maximum(la, lb), np.minimum(la, lb))
        # Pointer jumping in place, on the cells still moving only.
        act = np.flatnonzero(label != np.arange(n_cells))
        while len(act):
            up = label[act]
            upup = label[up]
            ch = np.flatnonzero(upup != up)
            act = act[ch]
            label[act] = upup[ch]
        la, lb = label[ea], label[eb]


def _paint(n: int, starts: np.ndarray, ends: np.ndarray, values=None, fill=-1) -> np.ndarray:
    """Per row of 0..n: ``values[k]`` (default k) of the range [starts[k], ends[k]) holding
    it, or `fill` (ranges sorted and disjoint). One `np.repeat`, no search."""
    k = len(starts)
    vals = np.full(2 * k + 1, fill, dtype=np.int64)
    vals[1::2] = np.arange(k) if values is None else values
    lens = np.empty(2 * k + 1, dtype=np.int64)
    lens[1::2] = ends - starts
    lens[0:-1:2] = starts - np.concatenate(([0], ends[:-1]))
    lens[-1] = n - (ends[-1] if k else 0)
    return np.repeat(vals, lens)


def _label_pixels(clus, use, runid, x, y, n_runs):
    """Writes into `clus` the cluster numbers of the digis where `use` is set (the valid
    pixels of the module runs; `runid` is the run of every digi): 8-connected components
    per run, numbered per run in ascending lowest digi. Returns the clusters of each run.

    Pixels sorted by (run, row, column) form horizontal segments of consecutive columns
    (duplicates included), which are connected already; two segments of consecutive rows
    touch when their column ranges, widened by one, overlap. Components over the segments
    come from `_components`."""
    n = len(clus)
    # Sort (key, digi) packed in one int64: digis break ties, duplicates included; the
    # other digis get the largest value and sort to the end.
    bits = int(n).bit_length()
    if (n_runs + 1) * _RUN_STRIDE >= 1 << (61 - bits):  # pragma: no cover - huge chunks
        raise ValueError("clusterize: too many digis in one chunk")
    key = x.astype(np.int64) * _W
    key += y
    key += _W + 1
    packed = (runid * _RUN_STRIDE + key) << bits
    packed |= np.arange(n, dtype=np.int64)
    np.putmask(packed, ~use, np.iinfo(np.int64).max)
    packed.sort()
    m = int(np.count_nonzero(use))
    packed = packed[:m]
    skey = packed >> bits
    sdig = packed & ((1 << bits) - 1)

    # Horizontal segments: a new one wherever the column jumps by more than one. Padding
    # keeps rows (and runs) apart: the last column of a row and the first of the next differ
    # by 3.
    brk = np.empty(m, dtype=bool)
    brk[0] = True
    np.greater(skey[1:] - skey[:-1], 1, out=brk[1:])
    seg_start = np.flatnonzero(brk)
    n_seg = len(seg_start)
    seg_end = np.append(seg_start[1:], m)
    lo = skey[seg_start]
    hi = skey[seg_end - 1]
    # Segments of the next row touching [lo - 1, hi + 1]: from the first whose end reaches
    # lo + W - 1, while their start is at most hi + W + 1 (rarely more than two).
    b = _positions(hi, lo + (_W - 1))
    lo_s = np.append(lo, np.iinfo(np.int64).max)
    reach = hi + (_W + 1)
    a = np.arange(n_seg)
    ea_parts, eb_parts = [], []
    while len(a):
        ok = np.flatnonzero(lo_s[b] <= reach)
        a, b, reach = a[ok], b[ok], reach[ok]
        ea_parts.append(a)
        eb_parts.append(b)
        b = b + 1
    label = _components(n_seg, np.concatenate(ea_parts), np.concatenate(eb_parts))

    # Root of a component: its lowest digi.
    seg_of = _cumsum(brk) - 1  # segment of each sorted pixel
    compmin = np.full(n_seg, n, dtype=np.int64)
    np.minimum.at(compmin, label[seg_of], sdig)  # set on the root segments
    roots = compmin[np.flatnonzero(label == np.arange(n_seg))]
    mark = np.zeros(n, dtype=bool)
    mark[roots] = True
    rank = _cumsum(mark) - 1  # clusters of lower root digi, all runs
    found = np.bincount(runid[roots], minlength=n_runs)
    base = np.cumsum(found) - found
    rd = compmin[label]  # root digi of each segment's cluster
    clus[sdig] = (rank[rd] - base[runid[rd]]).astype(np.int32)[seg_of]
    return found


def _clusterize_chunk(module, row, col, offsets, max_pix, first_event):
    """`clusterize_batch` on a few events (see there); run events are chunk-local."""
    n = len(module)
    n_ev = len(offsets) - 1
    valid = module != INVALID_MODULE
    vidx = np.flatnonzero(valid)
    vmod = module[vidx]
    if len(vidx) and (
        vmod.max() >= MAX_NUM_MODULES
        or np.max(row, where=valid, initial=0) >= NUM_ROWS
        or np.max(col, where=valid, initial=0) >= NUM_COLS
    ):
        bad = (vmod >= MAX_NUM_MODULES) | (row[vidx] >= NUM_ROWS) | (col[vidx] >= NUM_COLS)
        i = int(vidx[np.argmax(bad)])
        e = int(_event_of(offsets, np.array([i]))[0])
        where = f"clusterize: event {first_event + e}, digi {i - offsets[e]}"
        if module[i] >= MAX_NUM_MODULES:
            raise ValueError(
                f"{where}: module id {module[i]} out of range (< {MAX_NUM_MODULES} or "
                f"{INVALID_MODULE} expected)"
            )
        raise ValueError(
            f"{where}: pixel (row {row[i]}, col {col[i]}) outside the {NUM_ROWS} x {NUM_COLS} "
            "module"
        )

    # Every digi starts as its own (event-local) cluster, as `countModules` initialises.
    clus = np.arange(n, dtype=np.int32)
    if n_ev > 1:
        clus -= np.repeat(offsets[:-1], np.diff(offsets)).astype(np.int32)

    # Module runs: a run starts at each valid digi whose previous valid digi (same event)
    # belongs to another module; it ends at the next run start (or the event end).
    start = np.empty(len(vidx), dtype=bool)
    if len(vidx):
        start[0] = True
        np.not_equal(vmod[1:], vmod[:-1], out=start[1:])
    if n_ev > 1:  # the first valid digi of each event
        ev_first = np.searchsorted(vidx, offsets[:-1])
        start[ev_first[ev_first < len(vidx)]] = True
    first = vidx[np.flatnonzero(start)]
    rev = _event_of(offsets, first)
    end = np.minimum(np.append(first[1:], n), offsets[rev + 1])
    # At most 2000 runs per event: later runs are not clustered at all.
    if len(first) > MAX_NUM_MODULES:
        rank = np.arange(len(first)) - np.searchsorted(rev, rev, side="left")
        keep = np.flatnonzero(rank < MAX_NUM_MODULES)
        first, end, rev = first[keep], end[keep], rev[keep]
    end = np.minimum(end, first + max_pix)  # words past the cap stay unclustered
    rmod = module[first]
    n_runs = len(first)

    # Digis inside the runs: invalid ones get -9999, valid ones are clustered.
    runid = _paint(n, first, end)
    inrun = runid >= 0
    np.putmask(clus, inrun & ~valid, INVALID_CLUS)
    use = inrun & valid
    found = np.zeros(n_runs, dtype=np.int64)
    if use.any():
        found = _label_pixels(clus, use, runid, row, col, n_runs)
    # Per-module table: a module clustered in several runs of one event keeps the last count.
    if n_runs:
        k = rev * MAX_NUM_MODULES + rmod
        if _has_duplicates(k):
            found = _last_per_key(k, found)
    return clus, (rmod, first - offsets[rev], found, rev)


def clusterize_batch(module, row, col, offsets, max_pix_in_module=4000, first_event=0):
    """Clusters of a batch of events (the Rust ``clusterize`` of each event).

    ``module``, ``row`` (x), ``col`` (y): per-digi numpy arrays of all events; ``offsets``:
    ``n_events + 1`` row offsets. Returns ``(clus, runs)``: ``clus`` (int32, per digi: the
    cluster number in its module, -9999 for an invalid digi inside a module run, the
    digi's own event-local index outside every run or past the ``max_pix_in_module``-word
    cap) and ``runs``, a dict of per-run arrays ``module``, ``first_digi`` (event-local),
    ``clusters`` (clusters of the module id in the event: with a module in several runs, the
    last run's count, as the reference's per-module table) and ``event`` (batch-local).
    Raises ``ValueError`` for a valid digi with a module id >= 2000 or a pixel outside the
    160 x 416 module.
    """
    module = np.asarray(module)
    row = np.asarray(row)
    col = np.asarray(col)
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(module)
    if len(row) != n or len(col) != n or offsets[-1] != n:
        raise ValueError(
            f"clusterize: columns module/row/col have {n}/{len(row)}/{len(col)} rows, offsets end "
            f"at {offsets[-1]}"
        )
    if not 1 <= max_pix_in_module < 65535:
        raise ValueError(f"clusterize: max_pixels_per_module {max_pix_in_module} not in 1..65535")
    clus = np.empty(n, dtype=np.int32)
    parts = []
    for e0, e1 in _chunks(offsets):
        lo, hi = int(offsets[e0]), int(offsets[e1])
        c, (rmod, rfirst, rcount, rev) = _clusterize_chunk(
            module[lo:hi],
            row[lo:hi],
            col[lo:hi],
            offsets[e0 : e1 + 1] - lo,
            max_pix_in_module,
            first_event + e0,
        )
        clus[lo:hi] = c
        parts.append((rmod, rfirst, rcount, rev + e0))
    cat = [np.concatenate(x) for x in zip(*parts)] if parts else [np.zeros(0, np.int64)] * 4
    runs = {
        "module": cat[0].astype(np.uint16),
        "first_digi": cat[1].astype(np.uint32),
        "clusters": cat[2].astype(np.uint32),
        "event": cat[3].astype(np.int64),
    }
    return clus, runs


def _run_offsets(run_event: np.ndarray, n_ev: int) -> list[int]:
    return np.concatenate(([0], np.cumsum(np.bincount(run_event, minlength=n_ev)))).tolist()


class Clusterize(Step):
    """8-connected pixel clusters per module run, numbered by lowest digi index; the numpy
    port of the Rust ``clusterize`` step (same products, bit for bit).

    Input ``input`` (``calibrated_digis``); outputs ``pixel_clusters`` (the cluster of each
    digi) and ``cluster_modules`` (one row per module run: module, first digi, clusters).
    ``algorithm`` is accepted for compatibility: both Rust algorithms give these clusters.
    """

    consumes = {"input": "calibrated_digis"}
    produces = ["pixel_clusters", "cluster_modules"]
    params = {
        "algorithm": ("faithful", "faithful or union_find (identical output; numpy either way)"),
        "max_pixels_per_module": (4000, "words of a module run clustered at most (1..65534)"),
    }

    def __init__(self, params: dict):
        super().__init__(params)
        p = {"algorithm": "faithful", "max_pixels_per_module": 4000, **self.params}
        if p["algorithm"] not in ("faithful", "union_find"):
            raise ValueError(
                f"clusterize: algorithm '{p['algorithm']}' is not one of faithful, union_find"
            )
        self.max_pix = int(p["max_pixels_per_module"])
        if not 1 <= self.max_pix < 65535:
            raise ValueError(f"clusterize: max_pixels_per_module {self.max_pix} not in 1..65535")

    def produce(self, batch):
        d = batch.get("input", event=False)
        offsets = batch.offsets("input").to_numpy()
        module = d.column("module")
        clus, runs = clusterize_batch(
            module.to_numpy(),
            d.column("row").to_numpy(),
            d.column("col").to_numpy(),
            offsets,
            self.max_pix,
            batch.first_event,
        )
        batch.put(
            "pixel_clusters", pa.record_batch({"module": module, "cluster": clus}), offsets="input"
        )
        table = {k: runs[k] for k in ("module", "first_digi", "clusters")}
        batch.put("cluster_modules", table, offsets=_run_offsets(runs["event"], len(offsets) - 1))


def _charge_cut_event(mod, adc, clus, firsts, ncl, cfg):
    """Literal per-run port of the Rust `charge_cut` for one event (in place on `mod`,
    `clus`, `ncl`): used only for events whose runs the vectorised path cannot take
    (a module in several runs, overlapping or unordered runs, a run not starting on its
    module), never on `clusterize` output of well-formed data."""
    max_per, min_l1, min_other = cfg
    n = len(mod)
    for first in firsts:
        first = int(first)
        this = int(mod[first])
        if this == INVALID_MODULE:
            continue
        if this >= MAX_NUM_MODULES:
            raise ValueError(f"cluster_charge_cut: digi {first}: module id {this} out of range")
        other = np.flatnonzero((mod[first:] != INVALID_MODULE) & (mod[first:] != this))
        run_end = first + int(other[0]) if len(other) else n
        nclus = int(ncl[this])
        if nclus == 0:
            continue
        sl = slice(first, run_end)
        m, c = mod[sl], clus[sl]  # views: edits land in mod/clus
        v = m != INVALID_MODULE
        if nclus > max_per:
            drop = v & (c >= max_per)
            m[drop], c[drop] = INVALID_MODULE, REJECTED
            nclus = max_per
        v = m != INVALID_MODULE
        bad = v & ((c < 0) | (c >= nclus))
        m[bad], c[bad] = INVALID_MODULE, REJECTED
        v &= ~bad
        sums = np.bincount(c[v], weights=adc[sl][v], minlength=nclus)
        charge = sums.astype(np.int64).astype(np.uint32).view(np.int32)  # i32 wrapping sum
        ok = charge > (min_l1 if this < L1_MODULES else min_other)
        total = int(ok.sum())
        if total == nclus:
            continue
        ncl[this] = total
        newclus = np.where(ok, np.cumsum(ok), INVALID_MODULE + 1) - 1
        c[v] = newclus[c[v]]
        m[v & (c == REJECTED)] = INVALID_MODULE


def _charge_cut_chunk(mod, adc, clus, offsets, r_ev, r_mod, r_first, r_cnt, cfg, first_event):
    """`charge_cut_batch` on a few events, in place on `mod`, `clus` and `r_cnt` (the
    clusters per module-product row); `r_ev` are chunk-local events."""
    max_per, min_l1, min_other = cfg
    n = len(mod)
    if len(r_ev) == 0:
        return
    ev_len = offsets[1:] - offsets[:-1]
    past = r_first >= ev_len[r_ev]
    if past.any():
        i = int(np.argmax(past))
        raise ValueError(
            f"cluster_charge_cut: event {first_event + int(r_ev[i])}: module run starts at digi "
            f"{r_first[i]}, the event has {ev_len[r_ev[i]]} digis"
        )
    first = offsets[r_ev] + r_first
    this = mod[first]
    valid = mod != INVALID_MODULE

    # Events the vectorised path takes: every run starts on a digi of its own module, runs
    # in digi order, no module twice, and each run ends (first valid digi of another module)
    # where the next one starts or at the event end. Others go through the literal port.
    same = r_ev[1:] == r_ev[:-1]
    end = offsets[r_ev + 1]
    end[:-1] = np.where(same, first[1:], end[:-1])
    bad = this != r_mod
    bad[1:] |= same & ((first[1:] <= first[:-1]) | (this[1:] == this[:-1]))
    k = r_ev * MAX_NUM_MODULES + r_mod
    if _has_duplicates(k):
        ks = np.sort(k)
        bad |= np.isin(k, ks[1:][ks[1:] == ks[:-1]])
    slow = np.unique(r_ev[bad]) if bad.any() else np.zeros(0, dtype=np.int64)
    while True:
        rows = np.flatnonzero(~np.isin(r_ev, slow)) if len(slow) else np.arange(len(r_ev))
        nclus = r_cnt[rows].astype(np.int64)
        act = np.flatnonzero(nclus > 0)  # a module without clusters is left alone
        rows, nclus = rows[act], nclus[act]
        if len(rows) == 0:
            break
        # Per digi: clusters of its run (0 outside the runs), its run's first slot, module.
        eff = np.minimum(nclus, max_per)
        slot_end = np.cumsum(eff)
        n_slots = int(slot_end[-1])
        # One paint of (first slot, module, clusters) packed in 35 + 11 + 17 bits.
        packed = _paint(
            n,
            first[rows],
            end[rows],
            ((slot_end - eff) << 28) | (this[rows].astype(np.int64) << 17) | eff,
            n_slots << 28,
        )
        eff_d = packed & 0x1FFFF
        consider = valid & (eff_d > 0)  # the valid digis of runs with clusters
        wrong = consider & (mod != ((packed >> 17) & 0x7FF))
        if not wrong.any():
            break
        slow = np.union1d(slow, _event_of(offsets, np.flatnonzero(wrong)))  # runs end early

    if len(rows):
        slot = (packed >> 28) + clus
        # In 0..eff (a negative number is a huge unsigned one); else: never clustered, or
        # over the cap.
        inrange = consider & (clus.view(np.uint32) < eff_d)
        np.putmask(slot, ~inrange, n_slots)  # a spare slot, rejected
        sums = np.bincount(slot, weights=adc, minlength=n_slots + 1)[:n_slots]
        q = sums.astype(np.int64).astype(np.uint32).view(np.int32)  # i32 wrapping sum
        cut = np.where(this[rows] < L1_MODULES, min_l1, min_other)
        ok = q > np.repeat(cut, eff)
        cok = _cumsum(ok)
        ok_before = np.concatenate(([0], cok[slot_end[:-1] - 1]))
        n_ok = cok[slot_end - 1] - ok_before
        # New number of each slot: dense among the passing clusters of its run, else 9999
        # (arithmetic select: masked numpy operations are slow on irregular masks).
        oki = ok.view(np.int8)
        code = np.full(n_slots + 1, REJECTED, dtype=np.int64)
        code[:n_slots] += (cok - 1 - np.repeat(ok_before, eff) - REJECTED) * oki
        new = code.astype(np.int32)[slot]
        np.copyto(clus, new, where=consider)
        mod[np.flatnonzero(consider & (new == REJECTED))] = INVALID_MODULE
        # A module whose clusters all pass keeps its count (even above the cap).
        r_cnt[rows] = np.where(n_ok == eff, nclus, n_ok)

    for e in slow.tolist():
        lo, hi = int(offsets[e]), int(offsets[e + 1])
        er = np.flatnonzero(r_ev == e)
        ncl = np.zeros(MAX_NUM_MODULES, dtype=np.int64)
        for i in er:  # a module listed twice keeps its last count
            ncl[r_mod[i]] = r_cnt[i]
        try:
            _charge_cut_event(mod[lo:hi], adc[lo:hi], clus[lo:hi], r_first[er], ncl, cfg)
        except ValueError as err:
            raise ValueError(f"{err} (event {first_event + e})") from None
        r_cnt[er] = ncl[r_mod[er]]


def charge_cut_batch(
    module,
    charge,
    clus,
    offsets,
    run_event,
    run_module,
    run_first,
    run_clusters,
    max_clusters_per_module=1024,
    min_charge_l1=2000,
    min_charge=4000,
    first_event=0,
):
    """The Rust ``charge_cut`` over a batch of events.

    Digi columns ``module``, ``charge`` (electrons), ``clus`` with ``offsets``; the module
    product as per-row ``run_event`` (batch-local, non-decreasing), ``run_module``,
    ``run_first`` (event-local) and ``run_clusters``. Returns ``(module, clus, clusters)``:
    the new digi columns (pixels of dropped clusters get 9999 in both) and, per
    module-product row, the surviving clusters of its module id. Raises ``ValueError`` for
    a module id >= 2000 in the module product or a run starting past its event.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_ev = len(offsets) - 1
    if not 1 <= max_clusters_per_module <= 65535:
        raise ValueError(
            f"cluster_charge_cut: max_clusters_per_module {max_clusters_per_module} not in "
            "1..=65535"
        )
    run_event = np.asarray(run_event, dtype=np.int64)
    run_module = np.asarray(run_module).astype(np.int64)
    run_first = np.asarray(run_first).astype(np.int64)
    if len(run_module) and run_module.max() >= MAX_NUM_MODULES:
        i = int(np.argmax(run_module >= MAX_NUM_MODULES))
        raise ValueError(
            f"cluster_charge_cut: event {first_event + int(run_event[i])}: module id "
            f"{run_module[i]} "
            f"out of range in the module product"
        )
    out_mod = np.array(module, dtype=np.uint16)
    out_clus = np.array(clus, dtype=np.int32)
    counts = np.array(run_clusters, dtype=np.int64)
    charge = np.asarray(charge)
    row_off = np.searchsorted(run_event, np.arange(n_ev + 1))
    cfg = (max_clusters_per_module, min_charge_l1, min_charge)
    for e0, e1 in _chunks(offsets):
        lo, hi = int(offsets[e0]), int(offsets[e1])
        r0, r1 = int(row_off[e0]), int(row_off[e1])
        _charge_cut_chunk(
            out_mod[lo:hi],
            charge[lo:hi],
            out_clus[lo:hi],
            offsets[e0 : e1 + 1] - lo,
            run_event[r0:r1] - e0,
            run_module[r0:r1],
            run_first[r0:r1],
            counts[r0:r1],
            cfg,
            first_event + e0,
        )
    return out_mod, out_clus, counts.astype(np.uint32)


class ChargeCut(Step):
    """Drops clusters at or below the charge threshold and renumbers densely; the numpy port
    of the Rust ``cluster_charge_cut`` step (same products, bit for bit).

    Inputs ``digis`` (``calibrated_digis``), ``clusters`` (``pixel_clusters``), ``modules``
    (``cluster_modules``); outputs ``clustered_digis`` and ``hit_modules``.
    """

    consumes = {
        "digis": "calibrated_digis",
        "clusters": "pixel_clusters",
        "modules": "cluster_modules",
    }
    produces = ["clustered_digis", "hit_modules"]
    params = {
        "min_charge_l1": (
            2000,
            "threshold on BPix L1 (detIndex < 96), e; a cluster passes above it",
        ),
        "min_charge": (4000, "threshold elsewhere, e"),
        "max_clusters_per_module": (1024, "clusters kept per module (1..1024)"),
    }

    def __init__(self, params: dict):
        super().__init__(params)
        p = {
            "min_charge_l1": 2000,
            "min_charge": 4000,
            "max_clusters_per_module": 1024,
            **self.params,
        }
        self.min_l1, self.min_other = int(p["min_charge_l1"]), int(p["min_charge"])
        self.max_per = int(p["max_clusters_per_module"])
        for name, val, lo, hi in (
            ("min_charge_l1", self.min_l1, 0, 2**31 - 1),
            ("min_charge", self.min_other, 0, 2**31 - 1),
            ("max_clusters_per_module", self.max_per, 1, 1024),
        ):
            if not lo <= val <= hi:
                raise ValueError(f"cluster_charge_cut: {name} = {val} not in {lo}..={hi}")

    def produce(self, batch):
        d = batch.get("digis", event=False)
        c = batch.get("clusters", event=False)
        m = batch.get("modules", event=False)
        offsets = batch.offsets("digis").to_numpy()
        if not np.array_equal(batch.offsets("clusters").to_numpy(), offsets):
            raise ValueError(
                "cluster_charge_cut: inputs 'clusters' and 'digis' have different rows per event"
            )
        m_off = batch.offsets("modules").to_numpy()
        run_event = np.repeat(np.arange(len(m_off) - 1), np.diff(m_off))
        run_first = m.column("first_digi")
        out_mod, out_clus, clusters = charge_cut_batch(
            d.column("module").to_numpy(),
            d.column("charge").to_numpy(),
            c.column("cluster").to_numpy(),
            offsets,
            run_event,
            m.column("module").to_numpy(),
            run_first.to_numpy(),
            m.column("clusters").to_numpy(),
            self.max_per,
            self.min_l1,
            self.min_other,
            batch.first_event,
        )
        batch.put("clustered_digis", {"module": out_mod, "cluster": out_clus}, offsets="digis")
        batch.put(
            "hit_modules",
            pa.record_batch(
                {"module": m.column("module"), "first_digi": run_first, "clusters": clusters}
            ),
            offsets="modules",
        )
