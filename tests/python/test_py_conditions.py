"""Conditions reach Python (driver and steps) as Arrow tables shared with Rust, and a run can
be restricted to a range of events."""

import numpy as np
import pyarrow as pa
import pytest
import quiver


@pytest.fixture(scope="module")
def dataset(small_dataset):
    return small_dataset


def test_conditions_of_a_dataset(dataset):
    c = quiver.conditions(dataset)
    assert {
        "BeamSpot",
        "CpeParams.common",
        "CpeParams.det",
        "CpeParams.average_geometry",
        "CpeParams.end_caps",
        "CablingMap",
        "GainCalibration.modules",
        "GainCalibration.data",
        "GainCalibration.encoding",
    } <= set(c)
    det = c["CpeParams.det"]
    assert det.num_rows == 1856
    assert (
        det.schema.field("r33").type == pa.float32()
        and det.schema.field("is_barrel").type == pa.bool_()
    )
    # detIndex order; barrel modules first, one rotation matrix per module (orthonormal rows).
    assert det.column("index").to_pylist() == list(range(1856))
    r = np.stack(
        [det.column(f"r{i}{j}").to_numpy() for i in (1, 2, 3) for j in (1, 2, 3)], axis=1
    ).reshape(-1, 3, 3)
    assert np.allclose(r @ r.transpose(0, 2, 1), np.eye(3), atol=1e-5)
    assert c["BeamSpot"].num_rows == 1
    with pytest.raises(
        quiver.QuiverError, match="missing does not exist; make one with `quiver generate"
    ):
        quiver.conditions(dataset / "missing")


class ReadsConditions(quiver.Step):
    """Publishes, per event, the beam spot z it reads from the conditions, and remembers the
    address of a condition buffer per batch."""

    consumes = {"input": "beamspot"}
    produces = {"floats": pa.schema([pa.field("value", pa.float32(), nullable=False)])}
    seen: list = []

    def produce(self, batch):
        c = batch.conditions
        ReadsConditions.seen.append(c["CpeParams.det"].column("px").buffers()[1].address)
        z = c["BeamSpot"].column("z").to_numpy()[0]
        batch.put(
            "floats",
            {"value": np.full(batch.n_events, z, np.float32)},
            offsets=[*range(batch.n_events + 1)],
        )


def test_python_steps_read_conditions_shared(dataset):
    ReadsConditions.seen.clear()
    plan = (
        quiver.Plan()
        .add("raw", "read_raw")
        .add("bs", "beamspot")
        .add("z", ReadsConditions, input="bs")
    )
    result = plan.run(input=dataset, threads=2, batch_size=3)
    assert result["z"].column("value").to_pylist() == result["bs"].column("z").to_pylist()
    assert (
        len(ReadsConditions.seen) == 4 and len(set(ReadsConditions.seen)) == 1
    )  # made once per job


def test_a_range_of_events(dataset):
    plan = quiver.Plan().add("raw", "read_raw").add("digis", "raw_to_digis")
    whole = plan.run(input=dataset, threads=1, collect=["digis:digis"])["digis"]
    part = plan.run(
        input=dataset, threads=2, batch_size=2, first_event=4, events=5, collect=["digis:digis"]
    )["digis"]
    events = part.column("event").to_numpy()
    assert events.min() == 4 and events.max() == 8
    mask = (whole.column("event").to_numpy() >= 4) & (whole.column("event").to_numpy() < 9)
    assert part.combine_chunks().equals(whole.filter(pa.array(mask)).combine_chunks())
    with pytest.raises(quiver.PlanError, match="first event 12 is beyond the input's 12 events"):
        plan.run(input=dataset, first_event=12)
