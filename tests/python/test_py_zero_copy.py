"""Zero-copy: a product's data buffer has the same address in Rust, in pyarrow and in
Polars; a product put from numpy keeps numpy's buffer; a Python step reads the products
Rust published without copying them."""

import numpy as np
import pyarrow as pa
import quiver


def polars_chunk_addresses(series):
    """Data address of each chunk of a Polars Series (numpy views that may not copy)."""
    return [c.to_numpy(allow_copy=False).ctypes.data for c in series.get_chunks()]


def test_same_buffer_in_rust_pyarrow_and_polars():
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=1000)
        .add("squared", "square", input="numbers")
    )
    r = plan.run(events=48, threads=2, batch_size=16)
    rust = r.rust_addresses("squared")["value"]
    assert len(rust) == 3 and len(set(rust)) == 3 and all(rust)
    chunks = r["squared"].column("value").chunks
    assert [c.buffers()[1].address + 4 * c.offset for c in chunks] == rust
    assert polars_chunk_addresses(r.polars("squared")["value"]) == rust
    # And once more through the C stream interface back into Rust.
    assert quiver._quiver.buffer_addresses(r["squared"], "value") == rust


class SeenFromPython(quiver.Step):
    consumes = {"input": "floats"}
    produces = ["floats"]
    inputs_seen = {}
    outputs_made = {}

    def produce(self, batch):
        x = batch.get("input").column("value")  # with the event column added
        y = batch.get("input", event=False).column("value").to_numpy()  # numpy view
        assert x.buffers()[1].address == y.ctypes.data
        SeenFromPython.inputs_seen[batch.first_event] = y.ctypes.data
        # A new numpy buffer that only the dict refers to: published without a copy (an
        # array the step still holds is copied, test_put_frozen.py).
        cols = {"value": np.multiply(y, y)}
        SeenFromPython.outputs_made[batch.first_event] = cols["value"].ctypes.data
        batch.put("floats", cols, offsets="input")
        assert (batch.offsets("input").to_numpy() == np.arange(batch.n_events + 1) * 100).all()


def test_python_step_reads_rust_buffers_and_numpy_puts_keep_theirs():
    SeenFromPython.inputs_seen.clear()
    SeenFromPython.outputs_made.clear()
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=100)
        .add("py", SeenFromPython, input="numbers")
    )
    r = plan.run(events=40, threads=2, batch_size=8)
    firsts = sorted(SeenFromPython.inputs_seen)
    assert firsts == [0, 8, 16, 24, 32]
    assert r.rust_addresses("numbers")["value"] == [SeenFromPython.inputs_seen[f] for f in firsts]
    assert r.rust_addresses("py")["value"] == [SeenFromPython.outputs_made[f] for f in firsts]
    x = r["numbers"].column("value").to_numpy()
    assert (r["py"].column("value").to_numpy() == x * x).all()


class FromPolars(quiver.Step):
    consumes = {"input": "floats"}
    produces = ["floats"]
    made = {}

    def produce(self, batch):
        df = batch.polars("input")
        assert df.columns == ["event", "value"]
        out = df.with_columns(df["value"] * 2)
        FromPolars.made[batch.first_event] = polars_chunk_addresses(out["value"])[0]
        batch.put("floats", out)


def test_a_polars_frame_put_keeps_its_buffer():
    FromPolars.made.clear()
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=10)
        .add("pl", FromPolars, input="numbers")
    )
    r = plan.run(events=12, threads=1, batch_size=4)
    assert r.rust_addresses("pl")["value"] == [FromPolars.made[f] for f in (0, 4, 8)]


class CapsuleOnly:
    """A third-party Arrow exporter: only the PyCapsule stream interface (like arro3,
    nanoarrow or DuckDB objects)."""

    def __init__(self, table):
        self._t = table

    def __arrow_c_stream__(self, requested_schema=None):
        return self._t.__arrow_c_stream__(requested_schema)


class Exporters(quiver.Step):
    consumes = {"xs": ["floats"]}  # a list of products
    produces = ["floats"]
    made = {}

    def produce(self, batch):
        a = batch.get("xs", 0, event=False).column("value").to_numpy()
        b = batch.get("xs", 1, event=False).column("value").to_numpy()
        out = pa.table({"value": a + b})
        Exporters.made[batch.first_event] = out.column("value").chunks[0].buffers()[1].address
        batch.put("floats", CapsuleOnly(out), offsets=batch.offsets("xs").to_pylist())


def test_any_pycapsule_exporter_is_accepted_without_copy():
    Exporters.made.clear()
    plan = (
        quiver.Plan()
        .add("a", "random_floats", count=5, seed=1)
        .add("b", "random_floats", count=5, seed=2)
    )
    plan.add("sum", Exporters, xs=["a", "b"])
    r = plan.run(events=6, threads=2, batch_size=3)
    assert r.rust_addresses("sum")["value"] == [Exporters.made[0], Exporters.made[3]]
    a, b = (r[k].column("value").to_numpy() for k in ("a", "b"))
    assert (r["sum"].column("value").to_numpy() == a + b).all()
