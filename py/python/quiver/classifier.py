"""The trained track classifier in numpy: the features of ``reco/src/classifier/features.rs``
computed independently (vectorised over a batch's tracks), and the same gradient-boosted-trees
model JSON evaluated. :class:`TrackClassifier` is the Rust ``track_classifier`` step as a
Python step (``type = "python"``, ``module = "quiver.classifier"``,
``class = "TrackClassifier"``), with the same slots, parameters and product (``track_scores``).

The features are float32 and use the Rust operations in the same order (sums over a track's
hits run hit by hit, ``np.fmin``/``np.fmax`` ignore NaN as Rust's ``min``/``max`` do), so they
agree bit for bit; the scores agree within 1e-5 (``exp`` may differ in the last bit).
``scripts/train-classifier.py`` trains on these features.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from ._steps import Step

F32 = np.float32

#: Feature names, in the order of the feature vector (``quiver_reco::classifier::FEATURES``).
FEATURES = [
    "n_hits",
    "layer_gaps",
    "first_layer",
    "n_barrel",
    "chi2",
    "chi2_ndof",
    "pt",
    "abs_eta",
    "abs_tip",
    "zip",
    "sigma_phi",
    "sigma_tip",
    "sigma_pt_rel",
    "sigma_cot",
    "sigma_zip",
    "size_y_excess_mean",
    "size_y_excess_max",
    "size_x_mean",
    "charge_norm_mean",
    "charge_norm_min",
    "edge_hits",
    "shared_hits",
]
#: First detIndex of each layer, and the module count.
LAYER_START = np.array([0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856])
LOOSE = 2
HIGH_PURITY = 5
#: Barrel cluster length along z per unit |cotθ|, 1/8-pixel units (f32 as in Rust).
SIZE_Y_PER_COT = F32(8.0) * F32(0.0285) / F32(0.015)
F32_MAX = np.finfo(np.float32).max
#: Largest |base score| and |leaf value| a model may hold (as the Rust ``MAX_VALUE``).
MAX_VALUE = 1e6


#: Where the built-in model lives in a source checkout.
def builtin_model_text():
    """The JSON text of the model built into the library (``model = "builtin"``)."""
    from . import _quiver

    return _quiver.builtin_classifier_model()


SCORES_SCHEMA = pa.schema(
    [
        pa.field("score", pa.float32(), nullable=False),
        pa.field("quality", pa.uint8(), nullable=False),
    ]
)


class ClassifierError(ValueError):
    """A model file or input the classifier cannot use."""


def _finite(x):
    x = np.where(np.isnan(x), F32(-1.0), x)
    return np.clip(x, -F32_MAX, F32_MAX).astype(np.float32)


def layer_of(det_index):
    """Layer (0..9) of each detIndex; :class:`ClassifierError` for one that is no module."""
    det = np.asarray(det_index).astype(np.int64)
    bad = np.flatnonzero(det >= LAYER_START[-1])
    if bad.size:
        raise ClassifierError(
            f"product 'hits': hit {bad[0]}: detIndex {det[bad[0]]} is not a module "
            f"(0..{LAYER_START[-1]})"
        )
    return (np.searchsorted(LAYER_START, det, side="right") - 1).astype(np.int64)


def features(tracks, track_offsets, hits, hit_offsets):
    """The feature matrix (float32, one row per track, columns :data:`FEATURES`) of a batch.

    tracks: a pyarrow table/record batch with the ``tracks`` columns; track_offsets: the
    tracks' event offsets; hits: the ``hits`` columns; hit_offsets: the hits' event offsets.
    A track's ``hits`` are indices within its event.
    """
    toff = np.asarray(track_offsets, dtype=np.int64)
    hoff = np.asarray(hit_offsets, dtype=np.int64)
    if len(toff) != len(hoff):
        raise ClassifierError(f"{len(toff) - 1} events of tracks for {len(hoff) - 1} of hits")

    def col(t, name, dtype):
        a = t.column(name).to_numpy(zero_copy_only=False)
        if a.dtype != dtype:
            raise ClassifierError(f"column '{name}' holds {a.dtype}, expected {np.dtype(dtype)}")
        return a

    def fixed(name, width):
        c = tracks.column(name)
        if isinstance(c, pa.ChunkedArray):
            c = c.combine_chunks()
        if c.type.list_size != width:
            raise ClassifierError(f"product 'tracks': {name} has width {c.type.list_size}")
        return c.values.slice(c.offset * width, len(c) * width).to_numpy().reshape(-1, width)

    quality = col(tracks, "quality", np.uint8)
    pt, eta, tip, zip_, chi2 = (
        col(tracks, n, np.float32) for n in ("pt", "eta", "tip", "zip", "chi2")
    )
    cot = fixed("state", 5)[:, 3]
    cov = fixed("covariance", 15)
    lists = tracks.column("hits")
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    loff = lists.offsets.to_numpy().astype(np.int64)
    lvals = lists.values.to_numpy().astype(np.int64)
    lvals = lvals[loff[0] : loff[-1]]
    loff = loff - loff[0]
    n = len(quality)
    nh = np.diff(loff)
    det = col(hits, "det_index", np.uint16)
    size_x = col(hits, "size_x", np.int16)
    size_y = col(hits, "size_y", np.int16)
    charge = col(hits, "charge", np.int32)
    layer = layer_of(det)
    # Each list entry's track and event, and the hit's row in the batch.
    track_of = np.repeat(np.arange(n), nh)
    event_of_track = np.repeat(np.arange(len(toff) - 1), np.diff(toff))
    ev = event_of_track[track_of]
    n_ev_hits = np.diff(hoff)[ev]
    bad = np.flatnonzero(lvals >= n_ev_hits)
    if bad.size:
        k = bad[0]
        raise ClassifierError(
            f"product 'tracks': track {track_of[k]}: hit {lvals[k]} is not one of the event's "
            f"{n_ev_hits[k]} hits"
        )
    g = hoff[ev] + lvals
    users = np.zeros(len(det), dtype=np.int64)
    loose = quality >= LOOSE
    np.add.at(users, g[loose[track_of]], 1)
    # Padded (track, position) matrices, hits in list order.
    width = int(nh.max()) if n else 0
    pos = np.arange(len(lvals)) - loff[track_of]
    valid = np.zeros((n, width), dtype=bool)
    valid[track_of, pos] = True

    def pad(values, fill):
        m = np.full((n, width), fill, dtype=values.dtype)
        m[track_of, pos] = values
        return m

    L = pad(layer[g], -1)
    SX = pad(size_x[g].astype(np.float32), F32(0))
    SY = pad(size_y[g].astype(np.float32), F32(0))
    Q = pad(charge[g].astype(np.float32), F32(0))
    own = loose.astype(np.int64)
    shared_hit = pad(users[g] > own[track_of], False)
    edge = pad((size_x[g] < 0) | (size_y[g] < 0), False)

    def side(lay):
        return np.where(lay <= 3, 0, np.where(lay <= 6, 1, 2))

    gaps = np.zeros(n, dtype=np.int64)
    for j in range(width - 1):
        a, b = L[:, j], L[:, j + 1]
        ok = valid[:, j + 1] & (side(a) == side(b)) & (b > a)
        gaps += np.where(ok, b - a - 1, 0)
    abs_cot = np.abs(cot)
    s = np.sqrt(F32(1.0) + cot * cot)
    inv_s = F32(1.0) / s
    fwd = abs_cot / s
    barrel = valid & (L >= 0) & (L < 4)
    n_barrel = barrel.sum(axis=1)
    excess_sum = np.zeros(n, dtype=np.float32)
    excess_max = np.zeros(n, dtype=np.float32)
    sx_sum = np.zeros(n, dtype=np.float32)
    q_sum = np.zeros(n, dtype=np.float32)
    q_min = np.full(n, F32_MAX, dtype=np.float32)
    with np.errstate(all="ignore"):
        for j in range(width):
            v = valid[:, j]
            sx_sum = np.where(v, sx_sum + np.abs(SX[:, j]), sx_sum)
            b = barrel[:, j]
            q = Q[:, j] * np.where(b, inv_s, fwd)
            q_sum = np.where(v, q_sum + q, q_sum)
            q_min = np.where(v, np.fmin(q_min, q), q_min)
            excess = np.abs(SY[:, j]) - SIZE_Y_PER_COT * abs_cot
            excess_sum = np.where(b, excess_sum + excess, excess_sum)
            excess_max = np.where(b, np.fmax(excess_max, np.abs(excess)), excess_max)

        def mean(total, count):
            c = count.astype(np.float32)
            return np.where(c > 0, total / np.where(c > 0, c, F32(1)), F32(0)).astype(np.float32)

        nhf = nh.astype(np.float32)
        ndof = np.maximum(F32(2.0) * nhf - F32(5.0), F32(1.0))
        first = np.where(nh > 0, L[:, 0] if width else -1, -1).astype(np.float32)
        sq = lambda k: np.sqrt(np.abs(cov[:, k]))  # noqa: E731
        cols = [
            nhf,
            gaps.astype(np.float32),
            first,
            n_barrel.astype(np.float32),
            chi2,
            chi2 / ndof,
            pt,
            np.abs(eta),
            np.abs(tip),
            zip_,
            sq(0),
            sq(5),
            sq(9) * pt,
            sq(12),
            sq(14),
            mean(excess_sum, n_barrel),
            excess_max,
            mean(sx_sum, nh),
            mean(q_sum, nh),
            np.where(nh > 0, q_min, F32(0)),
            edge.sum(axis=1).astype(np.float32),
            shared_hit.sum(axis=1).astype(np.float32),
        ]
        return _finite(np.stack([np.asarray(c, dtype=np.float32) for c in cols], axis=1))


class Model:
    """A gradient-boosted-trees model file (format ``quiver-gbt`` version 1), checked as the
    Rust ``Model::parse`` checks it."""

    def __init__(self, path, text=None):
        """The model in the file ``path``, or in ``text`` (then ``path`` only names it)."""
        self.path = str(path)
        try:
            if text is None:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            m = json.loads(text)
        except (OSError, ValueError) as e:
            raise ClassifierError(f"model file {path}: {e}") from None
        try:
            self._load(m)
        except (KeyError, TypeError, ValueError) as e:
            raise ClassifierError(f"model file {path}: {e}") from None

    def _load(self, m):
        if m.get("format") != "quiver-gbt" or m.get("version") != 1:
            raise ValueError("not a quiver-gbt version 1 model")
        if m["features"] != FEATURES:
            raise ValueError(f"its features {m['features']} are not {FEATURES}")
        self.base_score = float(m["base_score"])
        self.working_point = float(m["working_point"])
        if not abs(self.base_score) <= MAX_VALUE or not 0.0 <= self.working_point <= 1.0:
            raise ValueError("base_score outside ±1e6 or working_point outside [0, 1]")
        self.trees = []
        for t, tree in enumerate(m["trees"]):
            feat = np.asarray(tree["feature"], dtype=np.int64)
            arrays = [np.asarray(tree[k], dtype=np.float64) for k in ("threshold", "value")]
            left, right = (np.asarray(tree[k], dtype=np.int64) for k in ("left", "right"))
            k = len(feat)
            split = feat >= 0
            if k == 0 or any(len(a) != k for a in (*arrays, left, right)):
                raise ValueError(f"tree {t}: node arrays of different lengths")
            idx = np.arange(k)
            if (
                np.any(feat[split] >= len(FEATURES))
                or np.any((left <= idx)[split] | (left >= k)[split])
                or np.any((right <= idx)[split] | (right >= k)[split])
                or not np.all(np.isfinite(arrays[0]))
                or not np.all(np.abs(arrays[1]) <= MAX_VALUE)
            ):
                raise ValueError(f"tree {t}: bad feature index, child or value")
            self.trees.append((feat, arrays[0], left, right, arrays[1]))

    def raw(self, x):
        """Raw scores (log-odds, float64) of a feature matrix, trees summed in order."""
        x = np.asarray(x, dtype=np.float32).astype(np.float64)
        rows = np.arange(len(x))
        raw = np.full(len(x), self.base_score)
        for feat, thr, left, right, value in self.trees:
            node = np.zeros(len(x), dtype=np.int64)
            while True:
                f = feat[node]
                inner = f >= 0
                if not inner.any():
                    break
                go_left = x[rows, np.maximum(f, 0)] <= thr[node]
                node = np.where(inner, np.where(go_left, left[node], right[node]), node)
            raw = raw + value[node]
        return raw

    def scores(self, x):
        """Probabilities of being genuine (float32)."""
        return (1.0 / (1.0 + np.exp(-self.raw(x)))).astype(np.float32)


def scores(model, x, quality):
    """Scores of the tracks of quality ≥ loose; 0 for the others (not evaluated)."""
    out = np.zeros(len(quality), dtype=np.float32)
    loose = np.asarray(quality) >= LOOSE
    if loose.any():
        out[loose] = model.scores(np.asarray(x)[loose])
    return out


def purity_quality(quality, scores, threshold):
    """The track's quality, ``highPurity`` where quality ≥ loose and score ≥ threshold."""
    q = np.asarray(quality, dtype=np.uint8)
    hp = (q >= LOOSE) & (np.asarray(scores, dtype=np.float32).astype(np.float64) >= threshold)
    return np.where(hp, np.uint8(HIGH_PURITY), q).astype(np.uint8)


class TrackClassifier(Step):
    """The Rust ``track_classifier`` step in numpy: ``track_scores`` (score, quality) for
    every track of ``tracks``. ``model = "builtin"`` is the model built into the library
    (the same text the Rust step compiles in)."""

    consumes = {"tracks": "tracks", "hits": "hits"}
    produces = {"track_scores": SCORES_SCHEMA}
    params = {
        "model": ("builtin", 'model JSON file; "builtin": the model compiled in'),
        "threshold": (-1.0, "score from which loose tracks become highPurity; -1: the model's"),
    }

    def __init__(self, params):
        super().__init__(params)
        path = self.params.get("model", "builtin")
        if path == "builtin":
            self.model = Model("builtin", text=builtin_model_text())
        else:
            self.model = Model(path)
        t = float(self.params.get("threshold", -1.0))
        if t == -1.0:
            t = self.model.working_point
        elif not 0.0 <= t <= 1.0:
            raise ClassifierError(f"threshold {t} is outside [0, 1] (-1: the model's)")
        self.threshold = t

    def produce(self, batch):
        t = batch.get("tracks", event=False)
        h = batch.get("hits", event=False)
        x = features(t, batch.offsets("tracks").to_numpy(), h, batch.offsets("hits").to_numpy())
        quality = t.column("quality").to_numpy(zero_copy_only=False)
        s = scores(self.model, x, quality)
        q = purity_quality(quality, s, self.threshold)
        batch.put(
            "track_scores",
            pa.RecordBatch.from_arrays([pa.array(s), pa.array(q)], schema=SCORES_SCHEMA),
            offsets="tracks",
        )
