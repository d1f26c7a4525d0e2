"""``quiver.report``: the truth report of a run (``quiver report``) as an object that shows
its headline numbers in a notebook and says where ``report.html`` is."""

from __future__ import annotations

import contextlib
import html
import json
import os
import pathlib
import sys

from . import _quiver
from ._errors import QuiverError

# Headline numbers shown first (summary.json has more; docs/validation.md lists them all).
HEADLINE = (
    "events",
    "track_efficiency",
    "track_fake_rate",
    "track_duplicate_rate",
    "vertex_efficiency",
    "pt_resolution",
    "zip_resolution_um",
    "hit_residual_rms_x_um",
    "hit_residual_rms_y_um",
    "mean_tracks",
    "mean_loose_tracks",
    "mean_vertices",
)


class Report:
    """A report directory (``summary.json``, ``report.html``, the Parquet tables)."""

    def __init__(self, directory):
        self.directory = pathlib.Path(directory)
        summary = self.directory / "summary.json"
        if not summary.is_file():
            raise QuiverError(
                f"{directory} is not a report directory: no summary.json (make one with "
                "quiver.report)"
            )
        self.summary: dict = json.loads(summary.read_text())
        """``summary.json``: efficiencies, rates, resolutions, per-event means."""
        self.html_path = self.directory / "report.html"
        """The self-contained page with every plot (open it in a browser)."""

    def __repr__(self):
        events = self.summary.get("events")
        return f"<quiver.Report {self.directory}: {events} events, open {self.html_path}>"

    def _repr_html_(self) -> str:
        def fmt(v):
            return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))

        rows = "".join(
            f"<tr><td>{k}</td><td>{fmt(self.summary[k])}</td></tr>"
            for k in HEADLINE
            if k in self.summary
        )
        return (
            f"<div><b>quiver.Report</b>: {html.escape(str(self.directory))}"
            f"<table><tr><th>quantity</th><th>value</th></tr>{rows}</table>"
            f'<p>Every plot: <a href="{html.escape(self.html_path.resolve().as_uri())}" '
            'target="_blank">'
            f"{html.escape(str(self.html_path))}</a></p></div>"
        )


@contextlib.contextmanager
def _stdout_to_devnull():
    """The process's file descriptor 1 (where Rust prints) goes nowhere for a while."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def report(run, truth, output) -> Report:
    """Runs ``quiver report --run RUN --truth TRUTH --output OUTPUT`` (the run directory of
    the pixel chain, the dataset it read) and returns the :class:`Report`."""
    args = [
        "quiver",
        "report",
        "--run",
        os.fspath(run),
        "--truth",
        os.fspath(truth),
        "--output",
        os.fspath(output),
    ]
    # The command prints summary.json (40 lines) on stdout: the Report shows it instead.
    with _stdout_to_devnull():
        code = _quiver.cli_main(args)
    if code != 0:
        raise QuiverError(f"quiver report failed (exit {code}); its message is on stderr")
    return Report(output)
