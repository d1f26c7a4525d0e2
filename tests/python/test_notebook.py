"""docs/examples/analysis.ipynb is executed, top to bottom, in a kernel of this interpreter
(the test venv's python, whatever `jupyter kernelspec list` says), and must finish without
an error in under a minute."""

import json
import sys
import time

import pytest
from conftest import ROOT

NOTEBOOK = ROOT / "docs/examples/analysis.ipynb"


def test_analysis_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    # A kernelspec that starts this very interpreter.
    spec = tmp_path / "kernels/quiver-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "quiver tests",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="quiver-test",
        timeout=120,
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    start = time.monotonic()
    client.execute()
    elapsed = time.monotonic() - start
    assert elapsed < 60, f"the notebook took {elapsed:.0f} s (keep it under a minute)"

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(h.startswith("<div><b>quiver.Plan</b>") for h in html)
    assert any(h.startswith("<div><b>quiver.Result</b>") for h in html)
    assert any(h.startswith("<div><b>quiver.Report</b>") and "report.html" in h for h in html)
    assert any("image/png" in o.get("data", {}) for o in outputs), "the histogram figure"
    text = "".join(o.get("text", "") for o in outputs)
    assert "loose tracks per event:" in text


def test_the_notebook_command_is_the_one_documented():
    """docs/python.md and the notebook's first cell give the same install line and command
    (scripts/test.sh runs that command)."""
    install, run = "pip install './py[notebook]'", "jupyter execute docs/examples/analysis.ipynb"
    guide = (ROOT / "docs/python.md").read_text()
    header = "".join(json.loads(NOTEBOOK.read_text())["cells"][0]["source"])
    for text in (guide, header):
        assert install in text and run in text
