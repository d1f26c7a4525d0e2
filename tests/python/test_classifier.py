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
    threshold = json.loads(quiver.classifier.BUILTIN_PATH.read_text())["working_point"]
    near = np.abs(s_rust.astype(np.float64) - threshold) <= TOL
    assert np.array_equal(q_rust[~near], q_py[~near])
    hp = q_rust == 5
    assert 0 < hp.sum() < loose.sum()


def test_python_model_refuses_bad_files(tmp_path):
    good = json.loads(quiver.classifier.BUILTIN_PATH.read_text())
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
