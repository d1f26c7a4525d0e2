"""docs/python.md teaches with examples: every ```python block runs, in order."""

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_python_guide_examples_run(capsys):
    text = (ROOT / "docs/python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    namespace = {"__name__": "quiver_docs"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"docs/python.md block {i + 1}", "exec"), namespace)
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    assert "step 'numbers': unknown parameter 'colour' (known: count, seed, low, high)" in printed
    assert " 1. numbers (random_floats, cpu)" in printed
