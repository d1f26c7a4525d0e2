"""The Python twin `quiver.classifier.TrackClassifier` against the Rust `track_classifier`
step, side by side on the same Rust tracks of a small generated dataset (a seed no training
uses): scores within 1e-5, and the same quality for every track, except that a track whose
score lies within 1e-5 of the threshold may fall on either side of it."""

import json
import subprocess

import numpy as np
import pytest

quiver = pytest.importorskip("quiver")
from conftest import pixel_chain_toml  # noqa: E402
from quiver.classifier import FEATURES, ClassifierError, Model  # noqa: E402

TOL = 1e-5


@pytest.fixture(scope="module")
def runs(quiver_bin, tmp_path_factory):
    ds = tmp_path_factory.mktemp("clf") / "ds"
    subprocess.run(
        [
            quiver_bin,
            "generate",
            "--events",
            "6",
            "--pileup",
            "60",
            "--seed",
            "13",
            "--no-progress",
            "--output",
            str(ds),
        ],
        check=True,
        capture_output=True,
    )
    plan = quiver.Plan.from_toml(pixel_chain_toml("tracks"))
    plan.add("clf", "track_classifier")
    plan.add(
        "clf_py",
        "python",
        backend="python",
        module="quiver.classifier",
        **{"class": "TrackClassifier"},
    )
    return plan.run(
        input=ds,
        threads=2,
        batch_size=4,
        collect=["tracks", "clf:track_scores", "clf_py:track_scores"],
    )


def test_python_twin_matches_rust(runs):
    rust, py, tracks = runs["clf:track_scores"], runs["clf_py:track_scores"], runs["tracks"]
    assert rust.num_rows == py.num_rows == tracks.num_rows > 1000
    assert np.array_equal(rust.column("event").to_numpy(), py.column("event").to_numpy())
    s_rust = rust.column("score").to_numpy()
    s_py = py.column("score").to_numpy()
    diff = np.abs(s_rust.astype(np.float64) - s_py)
    print(f"max |score difference| {diff.max():.3g} over {len(diff)} tracks")
    assert diff.max() <= TOL
    loose = tracks.column("quality").to_numpy() >= 2
    # Tracks below loose are not evaluated; loose ones spread over (0, 1).
    assert np.all(s_rust[~loose] == 0) and np.all(s_py[~loose] == 0)
    assert s_rust[loose].min() < 0.1 and s_rust[loose].max() > 0.9
    q_rust, q_py = rust.column("quality").to_numpy(), py.column("quality").to_numpy()
    threshold = json.loads(quiver.classifier.builtin_model_text())["working_point"]
    near = np.abs(s_rust.astype(np.float64) - threshold) <= TOL
    assert np.array_equal(q_rust[~near], q_py[~near])
    hp = q_rust == 5
    assert 0 < hp.sum() < loose.sum()


def test_python_model_refuses_bad_files(tmp_path):
    good = json.loads(quiver.classifier.builtin_model_text())
    assert good["features"] == FEATURES
    cases = {
        "damaged": '{"format": ',
        "features": json.dumps({**good, "features": FEATURES[::-1]}),
        "child": json.dumps(
            {**good, "trees": [{**good["trees"][0], "left": [0] * len(good["trees"][0]["left"])}]}
        ),
    }
    for name, text in cases.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        with pytest.raises(ClassifierError, match=str(p)):
            Model(p)
    with pytest.raises(ClassifierError, match="missing.json"):
        Model(tmp_path / "missing.json")


def hand_made(hits_list=(0, 1, 2, 3, 0, 1, 4)):
    """The Rust unit test's event: a loose 4-hit track skipping BPix3, a dup sharing two hits."""
    import pyarrow as pa

    f32 = pa.float32()
    cov = [0.0] * 30
    cov[0], cov[9], cov[15 + 14] = 0.25, 0.0625, -0.0625
    tracks = pa.table(
        {
            "quality": pa.array([2, 1], pa.uint8()),
            "pt": pa.array([2.0, float("nan")], f32),
            "eta": pa.array([-0.4812118, 1.0], f32),
            "tip": pa.array([-0.02, 0.1], f32),
            "zip": pa.array([1.0, float("inf")], f32),
            "chi2": pa.array([6.0, 1.0], f32),
            "state": pa.FixedSizeListArray.from_arrays(
                pa.array([0, 0, 0.5, -0.5, 0, 0, 0, 0.5, 1.0, 0], f32), 5
            ),
            "covariance": pa.FixedSizeListArray.from_arrays(pa.array(cov, f32), 15),
            "hits": pa.ListArray.from_arrays(
                pa.array([0, 4, 7], pa.int32()), pa.array(hits_list, pa.uint32())
            ),
        }
    )
    hits = pa.table(
        {
            "det_index": pa.array([10, 100, 700, 1200, 1300], pa.uint16()),
            "size_x": pa.array([16, 24, 16, -16, 8], pa.int16()),
            "size_y": pa.array([8, 40, 16, 16, 24], pa.int16()),
            "charge": pa.array([20000, 21000, 22000, 25000, 18000], pa.int32()),
        }
    )
    return tracks, hits


def test_features_of_a_hand_made_event():
    from quiver.classifier import features

    tracks, hits = hand_made()
    x = features(tracks, [0, 2], hits, [0, 5])
    f = {name: x[:, i] for i, name in enumerate(FEATURES)}
    assert list(f["n_hits"]) == [4, 3]
    assert list(f["layer_gaps"]) == [1, 0]
    assert list(f["n_barrel"]) == [3, 2]
    assert list(f["shared_hits"]) == [0, 2]
    assert list(f["edge_hits"]) == [1, 0]
    assert f["sigma_phi"][0] == 0.5 and f["sigma_pt_rel"][0] == 0.5 and f["sigma_zip"][1] == 0.25
    assert f["pt"][1] == -1 and f["zip"][1] == np.finfo(np.float32).max
    assert np.all(np.isfinite(x))
    bad_tracks, _ = hand_made((0, 1, 2, 3, 0, 1, 5))
    with pytest.raises(ClassifierError, match="product 'tracks': track 1: hit 5 is not one"):
        features(bad_tracks, [0, 2], hits, [0, 5])
