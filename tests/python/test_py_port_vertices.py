"""The numpy ports `quiver.pixel.Vertices` and `quiver.pixel.BeamSpot` against the Rust
`vertices` and `beamspot` steps: bit for bit on the default dataset (100 events, <PU> 50),
side by side on the same Rust tracks, checked by strict `compare` steps; the ports as drop-in
replacements (only `type`/`module`/`class` changed); and hand-built edge cases."""

import re
import tomllib

import numpy as np
import pytest

quiver = pytest.importorskip("quiver")
from conftest import ROOT  # noqa: E402
from quiver.pixel.vertices import IDV_DETACHED, IDV_NOISE, VertexConfig, VertexError, find_vertices  # noqa: E402

# Products of the pixel chain the ports are checked on (histograms and file output left out).
CHAIN_END = "tracks"
PY = {"type": "python", "backend": "python", "module": "quiver.pixel"}


def chain_steps():
    """The default chain (plans/pixel.toml) up to the tracks, as (label, keys) pairs."""
    steps = tomllib.loads((ROOT / "plans/pixel.toml").read_text())["step"]
    out = []
    for s in steps:
        s = dict(s)
        out.append((s.pop("label"), s))
        if out[-1][0] == CHAIN_END:
            return out
    raise AssertionError(f"plans/pixel.toml has no step '{CHAIN_END}'")


def side_by_side_plan():
    """The Rust chain, then each Rust step next to its Python port, compared strictly."""
    plan = quiver.Plan()
    for label, keys in chain_steps():
        if label == "hits":  # two beam spots in this plan: the chain uses the Rust one
            keys.setdefault("beamspot", "beamspot")
        plan.add(label, keys.pop("type"), **keys)
    pairs = [
        ("vertices", "vertices", {}),
        ("vertices_dbscan", "vertices", {"clusterizer": "dbscan"}),
        ("vertices_iterative", "vertices", {"clusterizer": "iterative", "min_t": 3, "eps": 0.05}),
    ]
    for label, ty, params in pairs:
        plan.add(label, ty, input="tracks", **params)
        plan.add(
            f"{label}_py",
            "python",
            backend="python",
            module="quiver.pixel",
            **{"class": "Vertices"},
            input="tracks",
            **params,
        )
        for product in ("vertices", "track_vertices"):
            plan.add(
                f"check_{label}_{product}",
                "compare",
                a=f"{label}:{product}",
                b=f"{label}_py:{product}",
                strict=True,
            )
    plan.add(
        "beamspot_py", "python", backend="python", module="quiver.pixel", **{"class": "BeamSpot"}
    )
    plan.add("check_beamspot", "compare", a="beamspot", b="beamspot_py", strict=True)
    return plan


def compared(summary):
    """(a, b) -> (rows, differences) from the compare steps' lines of a run summary."""
    found = re.findall(r"compared (\S+) with (\S+): (\d+) rows, (\d+) differences", summary)
    return {(a, b): (int(r), int(d)) for a, b, r, d in found}


@pytest.fixture(scope="module")
def rust_run():
    """The all-Rust chain with the Rust vertices (reference products)."""
    plan = quiver.Plan()
    for label, keys in chain_steps():
        plan.add(label, keys.pop("type"), **keys)
    plan.add("vertices", "vertices")
    return plan.run(
        threads=2,
        batch_size=16,
        collect=["beamspot", "vertices:vertices", "vertices:track_vertices"],
    )


@pytest.mark.parametrize("batch_size", [7, 32])
def test_ports_match_rust_bit_for_bit(batch_size):
    result = side_by_side_plan().run(
        threads=2, batch_size=batch_size, collect=["vertices:vertices"]
    )
    assert result.numbers["events"] == 100
    c = compared(result.summary)
    assert len(c) == 7, result.summary
    for (a, b), (rows, diffs) in c.items():
        assert diffs == 0, (a, b, result.summary)
        assert rows > 0, (a, b, result.summary)
    # Not a trivial comparison: the default dataset has many vertices, some with split tracks.
    assert c[("vertices:vertices", "vertices_py:vertices")][0] > 100 * 10, result.summary
    assert c[("beamspot:beamspot", "beamspot_py:beamspot")][0] == 100


def bits(table, column):
    a = table.column(column).to_numpy()
    return a.view(np.uint32) if a.dtype == np.float32 else a


def test_ports_are_drop_in_replacements(rust_run):
    """pixel.toml with `beamspot` and `vertices` swapped for the ports (same labels, no other
    key): the hits use the Python beam spot, and every product equals the Rust chain's."""
    plan = quiver.Plan()
    for label, keys in chain_steps():
        if label == "beamspot":
            keys = {**PY, "class": "BeamSpot"}
        plan.add(label, keys.pop("type"), **keys)
    plan.add("vertices", **{**PY, "class": "Vertices"})
    result = plan.run(
        threads=2,
        batch_size=10,
        collect=["beamspot", "vertices:vertices", "vertices:track_vertices"],
    )
    for sel in ("beamspot", "vertices:vertices", "vertices:track_vertices"):
        a, b = rust_run[sel], result[sel]
        assert a.column_names == b.column_names and a.num_rows == b.num_rows, sel
        for name in a.column_names:
            if name == "tracks":
                assert a.column(name).to_pylist() == b.column(name).to_pylist(), sel
            else:
                assert np.array_equal(bits(a, name), bits(b, name)), (sel, name)


def events(*evs):
    """Flat columns and offsets of events given as lists of (zip, cov_zip, pt, quality, n_hits)."""
    rows = [r for ev in evs for r in ev]
    cols = list(zip(*rows)) if rows else [[]] * 5
    dtypes = [np.float32, np.float32, np.float32, np.uint8, np.uint8]
    offsets = np.concatenate(([0], np.cumsum([len(ev) for ev in evs])))
    return [np.array(c, d) for c, d in zip(cols, dtypes)] + [offsets]


def test_edge_cases_by_hand():
    two = [
        (1.0, 25e-6, 2.0, 2, 4),
        (1.004, 25e-6, 1.0, 2, 4),
        (0.996, 25e-6, 1.0, 2, 4),
        (-1.0, 25e-6, 1.0, 2, 4),
        (-1.003, 25e-6, 1.0, 2, 4),
        (-0.998, 25e-6, 1.0, 2, 4),
        (5.0, 25e-6, 0.3, 2, 4),
    ]  # the last one below pt_min
    # After the first empty slot nothing counts (the three tracks would make a vertex).
    cut = [
        (0.0, 1e-5, 1.0, 2, 4),
        (0.0, 1e-5, 1.0, 2, 0),
        (0.0, 1e-5, 1.0, 2, 4),
        (0.001, 1e-5, 1.0, 2, 4),
        (0.002, 1e-5, 1.0, 2, 4),
    ]
    bad_quality = [(0.0, 1e-5, 1.0, 1, 4), (0.001, 1e-5, 1.0, 0, 4), (0.002, 1e-5, 1.0, 2, 3)]
    v = find_vertices(*events([], two, cut, bad_quality, []), VertexConfig(), first_event=0)
    assert list(np.diff(v["vertex_offsets"])) == [0, 2, 0, 0, 0]
    idv = v["idv"]
    assert len(idv) == 15 and (idv[7:] == -1).all() and idv[6] == -1
    lead = int(np.flatnonzero(v["pt2_rank"] == 0)[0])
    to, ti = v["track_offsets"], v["track_indices"]
    assert list(ti[to[lead] : to[lead + 1]]) == [0, 1, 2]
    assert abs(v["z"][lead] - 1.0) < 0.01 and v["ndof"][lead] == 2
    assert v["pt2"][lead] == np.float32(6.0)  # 4 + 1 + 1
    assert set(idv[:6]) == {0, 1} and IDV_NOISE not in idv and IDV_DETACHED not in idv
    # No track at all.
    v = find_vertices(*events([]), VertexConfig())
    assert len(v["z"]) == 0 and list(v["vertex_offsets"]) == [0, 0]


def test_bad_input_is_a_clear_error():
    with pytest.raises(VertexError, match=r"event 12: track 1: zip = nan is not finite"):
        find_vertices(
            *events([(0.0, 1e-5, 1.0, 2, 4), (np.nan, 1e-5, 1.0, 2, 4)]),
            VertexConfig(),
            first_event=12,
        )
    with pytest.raises(VertexError, match="cov_zip = 0.0 is not finite and positive"):
        find_vertices(*events([(0.0, 0.0, 1.0, 2, 4)]), VertexConfig())
    with pytest.raises(VertexError, match=r"eps = 0.5 cm must be in \(0, 0.1\]"):
        VertexConfig(eps=0.5)
    with pytest.raises(VertexError, match="clusterizer = 'kmeans'"):
        VertexConfig(clusterizer="kmeans")
