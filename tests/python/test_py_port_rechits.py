"""The numpy port of `rechits` (quiver.pixel.RecHits) against the Rust step: side by side on
the same inputs of the default dataset, compared strictly (bit for bit) by `compare` steps;
plus its pure functions against independent definitions."""

import numpy as np
import pytest
import quiver
from conftest import pixel_chain_toml
from quiver.pixel import rechits as R

# The chain up to the charge cut, then the Rust rechits and the port on the same products.
PLAN = (
    pixel_chain_toml("chargecut")
    + """
[[step]]
label = "hits"
type = "rechits"
digis = "calib"
clusters = "chargecut"
modules = "chargecut"
beamspot = "beamspot"

[[step]]
label = "hits_py"
type = "python"
backend = "python"
module = "quiver.pixel"
class = "RecHits"
digis = "calib"
clusters = "chargecut"
modules = "chargecut"
beamspot = "beamspot"

[[step]]
label = "same_hits"
type = "compare"
a = "hits:hits"
b = "hits_py:hits"
strict = true

[[step]]
label = "same_hit_layers"
type = "compare"
a = "hits:hit_layers"
b = "hits_py:hit_layers"
strict = true
"""
)


@pytest.mark.parametrize("batch_size", [7, 32])
def test_port_is_bit_identical_to_rust(batch_size):
    result = quiver.Plan.from_toml(PLAN).run(
        threads=2,
        batch_size=batch_size,
        collect=["hits:hits", "hits_py:hits", "hits_py:hit_layers"],
    )
    assert result.numbers["events"] == 100
    rust, port = result["hits:hits"], result["hits_py:hits"]
    # The compare steps fail the job at the first difference; check the products directly too.
    assert port.num_rows == rust.num_rows > 100 * 5000
    for name in rust.column_names:
        a = rust.column(name).to_numpy()
        b = port.column(name).to_numpy()
        assert a.dtype == b.dtype and np.array_equal(
            a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")
        ), name
    # Ten layers per event, whose hit counts add up to the event's hits.
    layers = result["hits_py:hit_layers"]
    per_event = (
        layers.group_by("event").aggregate([("hits", "sum"), ("layer", "count")]).sort_by("event")
    )
    assert per_event.num_rows == 100 and set(per_event.column("layer_count").to_pylist()) == {10}
    hits_per_event = np.bincount(port.column("event").to_numpy(), minlength=100)
    assert np.array_equal(per_event.column("hits_sum").to_numpy(), hits_per_event)


def test_exact_path_is_bit_identical_too(monkeypatch):
    """The per-run path for irregular module runs, forced on every event, on the same inputs."""
    monkeypatch.setattr(R, "_runs_cover_modules", lambda *args: False)
    exact, calls = R._keys_exact, []
    monkeypatch.setattr(R, "_keys_exact", lambda *args: calls.append(1) or exact(*args))
    result = quiver.Plan.from_toml(PLAN).run(
        threads=2, batch_size=8, events=16, collect=["hits_py:hits"]
    )
    assert result["hits_py:hits"].num_rows > 16 * 5000
    assert len(calls) == 16


def test_atan2s_within_two_units():
    rng = np.random.default_rng(7)
    a = rng.uniform(-np.pi, np.pi, 200_000)
    rad = rng.choice([1e-3, 0.7, 3.0, 17.0], a.size)
    x, y = (rad * np.cos(a)).astype(np.float32), (rad * np.sin(a)).astype(np.float32)
    exact = np.arctan2(y.astype(np.float64), x.astype(np.float64)) * 32768 / np.pi
    d = (R.unsafe_atan2s(y, x).astype(np.float64) - exact + 32768) % 65536 - 32768
    assert np.abs(d).max() <= 2.0
    assert np.abs(d).max() > 0  # a polynomial, not an exact atan2


def test_topology_and_offsets():
    px = np.arange(160)
    assert np.array_equal(R.local_x(px), [p + (p > 79) + (p > 80) for p in px])
    py = np.arange(416)
    big = [(p % 52) in (0, 51) for p in py]
    assert np.array_equal(R.is_big_pix_y(py), big)
    # Lower edges of consecutive columns differ by the width of the lower column.
    assert np.array_equal(np.diff(R.local_y(py)), np.where(big, 2, 1)[:-1])
    counts = np.array([[2, 2000, 1] + [0] * 1997])
    cms = R.hits_module_start(counts, max_hits=1026)
    assert cms.shape == (1, 2001) and list(cms[0, :4]) == [0, 2, 1026, 1026] and cms[0, -1] == 1026


def test_irregular_runs_follow_the_rust_loop():
    """A module in two runs: each run counts its own stretch of digis; the later run's
    clusters overwrite the slots they have pixels in."""
    n = 1856
    f = lambda v: np.full(n, v, np.float32)  # noqa: E731
    import pyarrow as pa

    common = pa.record_batch(
        {
            k: np.array([v], np.float32)
            for k, v in dict(
                thickness_b=0.0285, thickness_e=0.0285, pitch_x=0.01, pitch_y=0.015
            ).items()
        }
    )
    det = {
        "is_barrel": np.arange(n) < 1184,
        **{
            k: f(0)
            for k in (
                "shift_x",
                "shift_y",
                "charge_width_x",
                "charge_width_y",
                "x0",
                "y0",
                "py",
                "pz",
                "r11",
                "r13",
                "r21",
                "r22",
                "r31",
                "r32",
                "r33",
            )
        },
        "z0": f(-7),
        "px": f(7),
        "r12": f(1),
        "r23": f(1),
    }
    det.update({f"sx{i}": f(v) for i, v in enumerate((0.0012, 0.00115, 0.005))})
    det.update({f"sy{i}": f(v) for i, v in enumerate((0.0021, 0.00375, 0.0085))})
    cpe = R.Cpe(common, pa.record_batch(det))
    u16 = lambda v: np.array(v, np.uint16)  # noqa: E731
    hits, offsets, layers = R.rec_hits(
        cpe,
        row=u16([20, 5, 60]),
        col=u16([20, 5, 60]),
        charge=u16([9000, 9000, 9000]),
        module=u16([10, 200, 10]),
        cluster=np.array([0, 0, 1], np.int32),
        digi_offsets=[0, 3],
        run_module=u16([10, 200, 10]),
        run_first=np.array([0, 1, 2], np.uint32),
        run_clusters=np.array([2, 1, 2], np.uint32),
        run_offsets=[0, 3],
        beamspot=np.zeros((1, 3), np.float32),
        beamspot_offsets=[0, 1],
    )
    assert list(offsets) == [0, 3] and list(hits["det_index"]) == [10, 10, 200]
    pitch = np.float32(0.01)
    assert hits["x_local"][0] == pitch * np.float32(20.5 - 81) and hits["x_local"][
        1
    ] == pitch * np.float32(60.5 - 81)
    assert list(layers[0]) == [0, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3]
