#!/usr/bin/env python3
"""Trains the track classifier's default model (reco/models/track-classifier.json).

    pip install './py[train]'
    cargo build --release
    python3 scripts/train-classifier.py            # about 5 minutes on 2 cores

Generates training datasets with the CLI (seeds from 9001 up, <PU> mixed 30–100; never the
seeds the benchmarks or tests use), runs plans/pixel.toml and `quiver report` on each, labels
every loose track from the report's `track_truth.parquet` (genuine = matched to a particle,
duplicates included: the purity selection is about fakes), computes the features with
`quiver.classifier.features` (the Python twin of the Rust step's features), trains scikit-learn's
HistGradientBoostingClassifier, and writes the model JSON (format quiver-gbt 1) with its
provenance beside it. The working point is chosen on the training data: the lowest fake rate
among selected tracks that keeps ≥ --retention of the primaries (pT > 0.9 GeV, |η| < 2.4)
that loose tracks find.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd, log):
    print("+", " ".join(map(str, cmd)), file=log, flush=True)
    subprocess.run(list(map(str, cmd)), check=True, stdout=log, stderr=subprocess.STDOUT)


def event_offsets(table, n_events):
    ev = table.column("event").to_numpy()
    return np.searchsorted(ev, np.arange(n_events + 1)).astype(np.int64)


def run_labels(run, n_events):
    """Per track of the run (row order of tracks.tracks.parquet): particle (-1: none)."""
    tt = pq.read_table(run / "report" / "track_truth.parquet")
    ev = tt.column("event").to_numpy().astype(np.int64)
    tr = tt.column("track").to_numpy().astype(np.int64)
    tracks = pq.read_table(run / "tracks.tracks.parquet", columns=["event"])
    toff = event_offsets(tracks, n_events)
    particle = np.full(tracks.num_rows, -1, dtype=np.int64)
    particle[toff[ev] + tr] = tt.column("particle").to_numpy()
    return particle


def load(quiver, seed, pu, events, work, log):
    ds, run = work / f"ds{seed}", work / f"run{seed}"
    if not (ds / "manifest.toml").exists():
        sh(
            [
                quiver,
                "generate",
                "--events",
                events,
                "--pileup",
                pu,
                "--seed",
                seed,
                "--output",
                ds,
                "--no-progress",
            ],
            log,
        )
    if not (run / "tracks.tracks.parquet").exists():
        sh(
            [
                quiver,
                "run",
                ROOT / "plans" / "pixel.toml",
                "--input",
                ds,
                "--output",
                run,
                "--no-progress",
            ],
            log,
        )
    if not (run / "report" / "track_truth.parquet").exists():
        sh([quiver, "report", "--run", run, "--truth", ds, "--output", run / "report"], log)
    from quiver.classifier import features

    tracks = pq.read_table(run / "tracks.tracks.parquet")
    hits = pq.read_table(run / "hits.hits.parquet")
    x = features(tracks, event_offsets(tracks, events), hits, event_offsets(hits, events))
    particle = run_labels(run, events)
    quality = tracks.column("quality").to_numpy()
    event = tracks.column("event").to_numpy().astype(np.int64)
    # Primaries the efficiency counts (without its ≥ 3 layers condition), for the working point.
    p = pq.read_table(ds / "particles.parquet").to_pydict()
    prim = {
        (e, i)
        for e, i, pr, c, pt, eta in zip(
            p["event"], p["id"], p["process"], p["charge"], p["pt"], p["eta"]
        )
        if pr == 0 and c != 0 and pt > 0.9 and abs(eta) < 2.4
    }
    loose = quality >= 2
    key = event * 10_000_000 + particle
    primary = np.array([(e, q) in prim for e, q in zip(event[loose], particle[loose])])
    return {
        "x": x[loose],
        "y": (particle[loose] >= 0).astype(np.int8),
        "key": key[loose] + seed * 10**12,
        "primary": primary,
        "pu": pu,
        "seed": seed,
    }


def selection(scores, y, key, primary, t):
    """Fake rate among selected and retention of the primaries the loose tracks find."""
    sel = scores >= t
    fake = 1.0 - y[sel].mean() if sel.any() else 0.0
    found = np.unique(key[primary & (y == 1)])
    kept = np.unique(key[primary & (y == 1) & sel])
    return fake, len(kept) / max(len(found), 1)


def tree_json(predictor):
    n = predictor.nodes
    leaf = n["is_leaf"].astype(bool)
    return {
        "feature": np.where(leaf, -1, n["feature_idx"]).astype(int).tolist(),
        "threshold": np.where(leaf, 0.0, n["num_threshold"]).astype(float).tolist(),
        "left": np.where(leaf, -1, n["left"]).astype(int).tolist(),
        "right": np.where(leaf, -1, n["right"]).astype(int).tolist(),
        "value": np.where(leaf, n["value"], 0.0).astype(float).tolist(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=60, help="events per dataset")
    ap.add_argument("--pileups", default="30,45,60,75,90,100", help="<PU> of each dataset")
    ap.add_argument("--first-seed", type=int, default=9001)
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "train-classifier")
    ap.add_argument("--quiver", type=Path, default=ROOT / "target" / "release" / "quiver")
    ap.add_argument("--trees", type=int, default=60)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--learning-rate", type=float, default=0.2)
    ap.add_argument("--retention", type=float, default=0.9995)
    ap.add_argument(
        "--output", type=Path, default=ROOT / "reco" / "models" / "track-classifier.json"
    )
    a = ap.parse_args()
    import sklearn
    from sklearn.ensemble import HistGradientBoostingClassifier

    t0 = time.time()
    a.work.mkdir(parents=True, exist_ok=True)
    pus = [float(p) for p in a.pileups.split(",")]
    seeds = [a.first_seed + i for i in range(len(pus))]
    with open(a.work / "train.log", "a") as log:
        parts = [load(a.quiver, s, pu, a.events, a.work, log) for s, pu in zip(seeds, pus)]
    t_data = time.time() - t0
    x = np.concatenate([p["x"] for p in parts]).astype(np.float64)
    y = np.concatenate([p["y"] for p in parts])
    key = np.concatenate([p["key"] for p in parts])
    primary = np.concatenate([p["primary"] for p in parts])
    print(f"{len(y)} loose tracks, {1 - y.mean():.3f} fake; data in {t_data:.0f} s")
    clf = HistGradientBoostingClassifier(
        max_iter=a.trees,
        max_depth=a.depth,
        learning_rate=a.learning_rate,
        max_leaf_nodes=31,
        early_stopping=False,
        random_state=0,
    )
    clf.fit(x, y)
    t_fit = time.time() - t0 - t_data
    trees = [tree_json(it[0]) for it in clf._predictors]
    base = float(np.ravel(clf._baseline_prediction)[0])
    raw = base + sum(np.array(t["value"])[_leaves(t, x)] for t in trees)
    # The exported trees give sklearn's own raw scores.
    assert np.allclose(raw, clf.decision_function(x), atol=1e-9), "export disagrees with sklearn"
    scores = (1.0 / (1.0 + np.exp(-raw))).astype(np.float32).astype(np.float64)
    # Working point: lowest fake rate with the retention kept (a grid of thresholds).
    best = None
    for t in np.round(np.arange(0.005, 0.99, 0.005), 3):
        fake, ret = selection(scores, y, key, primary, t)
        if ret >= a.retention and (best is None or fake < best[1]):
            best = (float(t), fake, ret)
    if best is None:
        sys.exit(f"no threshold keeps a retention of {a.retention}")
    wp, fake, ret = best
    print(f"working point {wp}: training fake rate {fake:.4f}, primary retention {ret:.4f}")
    from quiver.classifier import FEATURES

    model = {
        "format": "quiver-gbt",
        "version": 1,
        "features": FEATURES,
        "base_score": base,
        "working_point": wp,
        "trees": trees,
    }
    a.output.parent.mkdir(parents=True, exist_ok=True)
    a.output.write_text(json.dumps(model, separators=(",", ":")) + "\n")
    prov = {
        "model": a.output.name,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python3 scripts/train-classifier.py", *sys.argv[1:]]),
        "seeds": seeds,
        "pileups": pus,
        "events_per_dataset": a.events,
        "loose_tracks": int(len(y)),
        "fake_fraction": float(1 - y.mean()),
        "label": "loose track matched to a particle (track_truth.parquet particle >= 0)",
        "features": FEATURES,
        "library": f"scikit-learn {sklearn.__version__} HistGradientBoostingClassifier",
        "params": {
            "max_iter": a.trees,
            "max_depth": a.depth,
            "learning_rate": a.learning_rate,
            "max_leaf_nodes": 31,
            "early_stopping": False,
            "random_state": 0,
        },
        "working_point": {
            "threshold": wp,
            "training_fake_rate": fake,
            "training_primary_retention": ret,
            "retention_target": a.retention,
        },
        "python": platform.python_version(),
        "numpy": np.__version__,
        "seconds": {
            "data": round(t_data, 1),
            "fit": round(t_fit, 1),
            "total": round(time.time() - t0, 1),
        },
        "cpus": os.cpu_count(),
    }
    a.output.with_name(a.output.stem + ".provenance.json").write_text(
        json.dumps(prov, indent=2) + "\n"
    )
    print(f"wrote {a.output} ({len(trees)} trees) in {time.time() - t0:.0f} s")


def _leaves(t, x):
    feat, thr = np.array(t["feature"]), np.array(t["threshold"])
    left, right = np.array(t["left"]), np.array(t["right"])
    node = np.zeros(len(x), dtype=np.int64)
    rows = np.arange(len(x))
    while True:
        f = feat[node]
        inner = f >= 0
        if not inner.any():
            return node
        go = x[rows, np.maximum(f, 0)] <= thr[node]
        node = np.where(inner, np.where(go, left[node], right[node]), node)


if __name__ == "__main__":
    main()
