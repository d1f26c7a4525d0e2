"""The numpy ports `quiver.pixel.Clusterize` / `quiver.pixel.ChargeCut` against the Rust
`clusterize` / `cluster_charge_cut` steps, side by side in one plan with strict `compare`
steps (the job fails at the first differing value): on the default dataset, and on
synthetic events built to hit the edge cases (duplicate pixels, invalid words, a module in
several runs, more than 2000 runs, runs over the 4000-word cap, more than 1024 clusters in
a module)."""

import numpy as np
import polars as pl
import pytest
import quiver
from conftest import pixel_chain_toml

CHAIN = pixel_chain_toml("calib")

SIDE_BY_SIDE = """
[[step]]
label = "clusters"
type = "clusterize"
input = "calib"

[[step]]
label = "clusters_py"
type = "python"
backend = "python"
module = "quiver.pixel"
class = "Clusterize"
input = "calib"

[[step]]
label = "chargecut"
type = "cluster_charge_cut"
digis = "calib"
clusters = "clusters:pixel_clusters"
modules = "clusters:cluster_modules"

[[step]]
label = "chargecut_py"
type = "python"
backend = "python"
module = "quiver.pixel"
class = "ChargeCut"
digis = "calib"
clusters = "clusters_py:pixel_clusters"
modules = "clusters_py:cluster_modules"
"""

COMPARED = [
    ("clusters:pixel_clusters", "clusters_py:pixel_clusters"),
    ("clusters:cluster_modules", "clusters_py:cluster_modules"),
    ("chargecut:clustered_digis", "chargecut_py:clustered_digis"),
    ("chargecut:hit_modules", "chargecut_py:hit_modules"),
]


def compares():
    return "".join(
        f'\n[[step]]\nlabel = "same_{i}"\ntype = "compare"\na = "{a}"\nb = "{b}"\nstrict = true\n'
        for i, (a, b) in enumerate(COMPARED)
    )


def check_equal(result):
    """The collected products of both sides are equal too, and not trivially empty."""
    for a, b in COMPARED:
        ta, tb = result[a], result[b]
        assert ta.num_rows == tb.num_rows > 0, (a, b)
        assert ta.equals(tb), (a, b)
    kept = result["chargecut_py:clustered_digis"].column("module").to_numpy()
    n_hits = int(
        result["chargecut_py:hit_modules"].column("clusters").to_numpy().astype(np.int64).sum()
    )
    return int((kept != 9999).sum()), n_hits


@pytest.mark.parametrize("batch_size", [7, 32])
def test_ports_equal_rust_on_the_default_dataset(batch_size):
    plan = quiver.Plan.from_toml(CHAIN + SIDE_BY_SIDE + compares())
    result = plan.run(
        events=100, threads=2, batch_size=batch_size, collect=[a for p in COMPARED for a in p]
    )
    pixels, hits = check_equal(result)
    assert result["clusters_py:pixel_clusters"].column("event").to_numpy()[-1] == 99
    # <PU> 50: thousands of hits per event survive the charge cut.
    assert pixels > 100 * 10_000 and hits > 100 * 5_000, (pixels, hits)


# --- synthetic edge cases ------------------------------------------------------------------


def synthetic_event(event):
    """One event's digis: module runs of blobs, single pixels and duplicates, with invalid
    words; even events carry > 2000 runs (modules repeat), odd ones a few big modules."""
    rng = np.random.default_rng(1000 + event)
    ids, xx, yy = [], [], []
    many = event % 2 == 0
    n_runs = 2100 if many else 8
    for r in range(n_runs):
        m = int(rng.integers(2000 if many else 300))
        if not many and r == 0:
            m = 50  # BPix L1: the other charge threshold
        n_pix = int(rng.integers(1, 5)) if many else int(rng.choice([40, 1500, 4300]))
        w, h = (3, 3) if many else (int(rng.integers(1, 161)), int(rng.integers(1, 417)))
        x0, y0 = int(rng.integers(0, 161 - w)), int(rng.integers(0, 417 - h))
        for _ in range(n_pix):
            if rng.integers(10) == 0:
                ids.append(9999)
                xx.append(int(rng.integers(65536)))
                yy.append(int(rng.integers(65536)))
            elif rng.integers(8) == 0 and ids and ids[-1] == m:
                ids.append(m)  # duplicate pixel
                xx.append(xx[-1])
                yy.append(yy[-1])
            else:
                ids.append(m)
                xx.append(x0 + int(rng.integers(w)))
                yy.append(y0 + int(rng.integers(h)))
    if not many:
        # Module 700: 1100 isolated pixels, so > 1024 clusters before the cut.
        for i in range(1100):
            ids.append(700)
            xx.append(2 * (i % 80))
            yy.append(2 * (i // 80))
    charge = rng.integers(0, 6000, len(ids))
    return ids, xx, yy, charge


class SyntheticDigis(quiver.Step):
    """A source of `calibrated_digis` from :func:`synthetic_event`."""

    produces = ["calibrated_digis"]

    def produce(self, batch):
        events = [synthetic_event(batch.first_event + e) for e in range(batch.n_events)]
        cols = {
            "row": np.concatenate([e[1] for e in events]).astype(np.uint16),
            "col": np.concatenate([e[2] for e in events]).astype(np.uint16),
            "charge": np.concatenate([e[3] for e in events]).astype(np.uint16),
            "module": np.concatenate([e[0] for e in events]).astype(np.uint16),
        }
        offsets = np.concatenate(([0], np.cumsum([len(e[0]) for e in events]))).tolist()
        batch.put("calibrated_digis", cols, offsets=offsets)


def test_ports_equal_rust_on_synthetic_edge_cases():
    plan = quiver.Plan.from_toml(SIDE_BY_SIDE + compares())
    plan.add("calib", SyntheticDigis)
    result = plan.run(events=6, threads=2, batch_size=4, collect=[a for p in COMPARED for a in p])
    check_equal(result)
    runs = result["clusters_py:cluster_modules"]
    per_event = np.bincount(runs.column("event").to_numpy(), minlength=6)
    assert per_event[0] == 2000  # the run cap was reached
    py = result["clusters_py:pixel_clusters"].column("cluster").to_numpy()
    assert (py == -9999).any()  # invalid words inside runs

    # Module 700 of the odd events: > 1024 clusters before the cut, at most 1024 hits after.
    def odd700(sel):
        df = result.polars(sel)
        return df.filter((pl.col("module") == 700) & (pl.col("event") % 2 == 1))[
            "clusters"
        ].to_numpy()

    before, after = odd700("clusters_py:cluster_modules"), odd700("chargecut_py:hit_modules")
    assert len(before) == 3 and (before == 1100).all()
    assert len(after) == 3 and ((after > 0) & (after <= 1024)).all()


def test_hand_built_runs_invalid_words_and_a_repeated_module():
    """The cores alone, on the Rust unit tests' hand-built cases."""
    from quiver.pixel.clusterize import charge_cut_batch, clusterize_batch

    def u16(*v):
        return np.array(v, dtype=np.uint16)

    # Digi 0 lies before every run (keeps its own index); invalid words inside runs get
    # -9999; module 3 is clustered twice and both rows carry its last count.
    ids, xx, yy = (
        u16(9999, 3, 3, 9999, 8, 8, 9999, 3),
        u16(0, 1, 2, 0, 5, 50, 0, 1),
        u16(0, 1, 2, 0, 5, 50, 0, 2),
    )
    clus, runs = clusterize_batch(ids, xx, yy, [0, 8])
    assert clus.tolist() == [0, 0, 0, -9999, 0, 1, -9999, 0]
    assert runs["module"].tolist() == [3, 8, 3] and runs["first_digi"].tolist() == [1, 4, 7]
    assert runs["clusters"].tolist() == [1, 2, 1]
    # Module 200: clusters of 3000 e (rejected: 4000 needed) and 5000 e (kept, renumbered 0).
    mod, cl, n = charge_cut_batch(
        u16(200, 200, 200),
        u16(3000, 2500, 2500),
        np.array([0, 1, 1], np.int32),
        [0, 3],
        [0],
        u16(200),
        [0],
        [2],
    )
    assert mod.tolist() == [9999, 200, 200] and cl.tolist() == [9999, 0, 0] and n.tolist() == [1]
    with pytest.raises(ValueError, match="module id 2000 out of range"):
        clusterize_batch(u16(2000), u16(0), u16(0), [0, 1])
