"""What a Python step publishes with batch.put cannot be changed by the step afterwards:
a numpy buffer reused across batches gives the same products as fresh arrays."""

import numpy as np
import pytest
import quiver


class ReuseBuffer(quiver.Step):
    """Squares into one buffer per worker, reused for every batch."""

    consumes = {"input": "floats"}
    produces = ["floats"]

    def produce(self, batch):
        x = batch.get("input", event=False).column("value").to_numpy()
        if getattr(self, "buf", None) is None or len(self.buf) != len(x):
            self.buf = np.empty_like(x)
        np.multiply(x, x, out=self.buf)
        batch.put("floats", {"value": self.buf}, offsets="input")


class Fresh(quiver.Step):
    consumes = {"input": "floats"}
    produces = ["floats"]

    def produce(self, batch):
        x = batch.get("input", event=False).column("value").to_numpy()
        batch.put("floats", {"value": x * x}, offsets="input")


def test_a_reused_buffer_gives_the_same_products_as_fresh_arrays():
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=2000, seed=3)
        .add("reused", ReuseBuffer, input="numbers")
        .add("fresh", Fresh, input="numbers")
    )
    r = plan.run(events=100, threads=4)
    x = r["numbers"].column("value").to_numpy()
    fresh = r["fresh"].column("value").to_numpy()
    assert (fresh == x * x).all()
    reused = r["reused"].column("value").to_numpy()
    assert len(reused) == 200_000
    assert int((reused != fresh).sum()) == 0


class WriteAfterPut(quiver.Step):
    consumes = {"input": "floats"}
    produces = ["floats"]
    outcomes = []

    def produce(self, batch):
        x = batch.get("input", event=False).column("value").to_numpy()
        held = x * x
        cols = {"value": x + 1}  # only the dict refers to it: published without a copy
        batch.put("floats", cols, offsets="input")
        try:
            cols["value"][:] = -1.0
            WriteAfterPut.outcomes.append("written")
        except ValueError as e:  # read-only now
            WriteAfterPut.outcomes.append(str(e))
        del held


def test_writing_into_a_published_array_raises_and_the_product_is_unchanged():
    WriteAfterPut.outcomes.clear()
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=50)
        .add("w", WriteAfterPut, input="numbers")
    )
    r = plan.run(events=8, threads=2)
    assert len(WriteAfterPut.outcomes) == 8
    assert all("read-only" in o for o in WriteAfterPut.outcomes), WriteAfterPut.outcomes
    x = r["numbers"].column("value").to_numpy()
    assert (r["w"].column("value").to_numpy() == x + 1).all()


@pytest.mark.parametrize("how", ["named", "view", "attribute"])
def test_arrays_the_step_still_holds_are_copied(how):
    from quiver import _publish

    base = np.arange(10.0)
    holder = type("H", (), {})()
    holder.a = base
    arr = {"named": base, "view": base[2:], "attribute": holder.a}[how]
    want = arr.copy()
    got = _publish.columns({"value": arr})["value"]
    base[:] = -7.0
    assert got.ctypes.data != arr.ctypes.data
    assert (got == want).all()
