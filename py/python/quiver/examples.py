"""Example steps written in Python, used by ``plans/examples/square-python.toml`` and the
tests: the toy ``square`` step as a Python step (numpy) and as a Polars step."""

import pyarrow as pa

from ._steps import Step, polars_step


class Square(Step):
    """Squares ``floats`` with numpy; bit-identical to the Rust ``square`` step."""

    consumes = {"input": "floats"}
    produces = ["floats"]

    def produce(self, batch):
        x = batch.get("input", event=False).column("value").to_numpy()  # zero-copy view
        batch.put("floats", pa.record_batch({"value": x * x}), offsets="input")


@polars_step(consumes={"x": "floats"}, produces="floats")
def square_polars(x):
    """Squares ``floats`` with Polars."""
    from ._optional import require

    pl = require("polars", extra="polars")

    return x.select("event", (pl.col("value") * pl.col("value")).alias("value"))
