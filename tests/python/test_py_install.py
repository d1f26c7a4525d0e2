"""Installs: the extras of py/pyproject.toml, the one-line error of a missing extra for each
documented feature (the module made unimportable), and the type stubs of the extension."""

import ast
import inspect
import pathlib
import re
import sys
import tomllib

import pyarrow as pa
import pytest
import quiver
import quiver._quiver
from conftest import ROOT
from quiver._optional import EXTRAS, MissingExtraError

PYPROJECT = tomllib.loads((ROOT / "py/pyproject.toml").read_text())
REQUIREMENTS = [
    line.strip()
    for line in (ROOT / "tests/python/requirements.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def _name(req: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+(\[[^\]]*\])?", req).group(0)


def test_every_extra_is_declared_and_pinned_like_the_tests():
    extras = PYPROJECT["project"]["optional-dependencies"]
    # `train` retrains the track classifier (scripts/train-classifier.py): a maintainer's tool,
    # not a feature of the package, so neither in `all` nor installed by the tests.
    assert set(extras) == set(EXTRAS) | {"all", "notebook", "train"}
    assert extras["all"] == [f"quiver[{','.join(EXTRAS)}]"]
    assert extras["notebook"][0] == "quiver[all]"  # the notebook uses every feature
    pinned = {_name(r): r for r in REQUIREMENTS}
    for extra, reqs in extras.items():
        if extra in ("all", "train"):
            continue
        for r in reqs:
            if r == "quiver[all]":
                continue
            # The same version range as the tests' requirements (what CI installs).
            assert pinned.get(_name(r)) == r, (
                f"extra {extra}: {r} vs requirements.txt {pinned.get(_name(r))}"
            )


def _assert_one_line(err, extra):
    msg = str(err)
    assert "\n" not in msg
    assert msg.endswith(f"pip install 'quiver[{extra}]'"), msg
    assert isinstance(err, ImportError)


@pytest.fixture
def toy_result():
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=3)
        .add("squared", "square", input="numbers")
    )
    return plan.run(events=4, threads=1)


def test_missing_datafusion_sql_and_query(monkeypatch, square_run, capsys):
    monkeypatch.setitem(sys.modules, "datafusion", None)
    with pytest.raises(MissingExtraError) as e:
        quiver.sql("SELECT count(*) FROM floats_squared", square_run)
    _assert_one_line(e.value, "sql")
    assert "'datafusion'" in str(e.value)
    from quiver.query import main

    assert main([str(square_run), "SELECT 1"]) == 2
    out = capsys.readouterr().out.strip()
    assert (
        out.startswith("error: ") and out.endswith("pip install 'quiver[sql]'") and "\n" not in out
    )


def test_missing_distributed_dask_and_reconstruct(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)
    import quiver.dask

    with pytest.raises(MissingExtraError) as e:
        quiver.dask.reconstruct(ROOT / "plans/pixel.toml", tmp_path, tmp_path / "out")
    _assert_one_line(e.value, "dask")
    code = quiver.dask.main(
        [str(ROOT / "plans/pixel.toml"), "--input", str(tmp_path), "--output", str(tmp_path / "o")]
    )
    assert code == 2
    assert capsys.readouterr().out.strip().endswith("pip install 'quiver[dask]'")


def test_missing_hist(monkeypatch):
    monkeypatch.setitem(sys.modules, "hist", None)
    import quiver.hist

    table = pa.table(
        {
            "histogram": ["h"] * 3,
            "bin": [0, 1, 2],
            "low_edge": [0.0, 0.0, 1.0],
            "high_edge": [0.0, 1.0, 1.0],
            "count": [0, 1, 0],
        }
    )
    with pytest.raises(MissingExtraError) as e:
        quiver.hist.to_hist(table)
    _assert_one_line(e.value, "hist")


def test_missing_polars(monkeypatch, toy_result, square_run):
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(MissingExtraError) as e:
        toy_result.polars("squared")
    _assert_one_line(e.value, "polars")
    with pytest.raises(MissingExtraError) as e:
        quiver.open(square_run)
    _assert_one_line(e.value, "polars")
    # Inside a Python step (Batch.polars, called from Rust): the same line, in the StepError.
    from quiver.examples import square_polars

    plan = (
        quiver.Plan().add("numbers", "random_floats", count=3).add("sq", square_polars, x="numbers")
    )
    with pytest.raises(quiver.StepError) as e:
        plan.run(events=2, threads=1)
    assert "pip install 'quiver[polars]'" in str(e.value)
    # pyarrow results need no extra.
    assert toy_result["squared"].num_rows == 12


def test_missing_awkward(monkeypatch, toy_result):
    monkeypatch.setitem(sys.modules, "awkward", None)
    with pytest.raises(MissingExtraError) as e:
        toy_result.awkward("squared")
    _assert_one_line(e.value, "awkward")


def test_require_rejects_an_unknown_extra():
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        quiver._optional.require("json", extra="nope")


def _stub():
    return ast.parse((ROOT / "py/python/quiver/_quiver.pyi").read_text())


def _public(names):
    return {n for n in names if not n.startswith("__") or n == "__version__"}


def test_stubs_name_exactly_what_the_extension_exports():
    tree = _stub()
    stub = set()
    classes = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stub.add(node.name)
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        if isinstance(node, ast.AnnAssign):
            stub.add(node.target.id)
    ext = quiver._quiver
    assert stub == _public(dir(ext)), "py/python/quiver/_quiver.pyi is out of date"
    for name, methods in classes.items():
        cls = getattr(ext, name)
        assert _public(methods) - {"__init__"} == {
            m for m in _public(dir(cls)) if m not in dir(object)
        }, name


def test_stub_signatures_match_the_text_signatures():
    """Parameter names of every function and method, where pyo3 exposes them."""
    tree = _stub()
    ext = quiver._quiver

    def params(fn: ast.FunctionDef):
        return [a.arg for a in fn.args.args if a.arg != "self"]

    for node in tree.body:
        targets = []
        if isinstance(node, ast.FunctionDef):
            targets.append((getattr(ext, node.name), node))
        elif isinstance(node, ast.ClassDef):
            cls = getattr(ext, node.name)
            targets += [
                (getattr(cls, f.name), f)
                for f in node.body
                if isinstance(f, ast.FunctionDef)
                and f.name != "__init__"
                and not any(
                    isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list
                )
            ]
        for obj, fn in targets:
            try:
                sig = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            assert [p for p in sig.parameters if p != "self"] == params(fn), fn.name


def test_package_is_typed():
    pkg = pathlib.Path(quiver.__file__).parent
    assert (pkg / "py.typed").exists()
    assert (pkg / "_quiver.pyi").exists()


def test_a_broken_installed_package_is_not_reported_as_missing(tmp_path, monkeypatch):
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg/__init__.py").write_text("import no_such_dependency_of_brokenpkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as e:
        quiver._optional.require("brokenpkg", extra="hist")
    assert (
        not isinstance(e.value, MissingExtraError)
        and e.value.name == "no_such_dependency_of_brokenpkg"
    )


def test_one_supported_python_range_everywhere():
    """README, getting-started and the Python guide state the range py/pyproject.toml
    declares, and nothing else (no 'Python 3.10')."""
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    for doc in ("README.md", "docs/getting-started.md", "docs/python.md"):
        text = (ROOT / doc).read_text()
        stated = set(re.findall(r"Python (3\.\d+)(\+| or newer)", text))
        assert stated == {("3.11", "+")} or stated == {("3.11", " or newer")}, (doc, stated)
    assert (
        "maturin develop"
        not in (ROOT / "README.md").read_text().split("## First steps")[1].split("```")[1]
    )
    wheel = (ROOT / "scripts/check-wheel.sh").read_text()
    assert "requires-python" in wheel, (
        "check-wheel.sh checks the Python it runs is the range's lowest"
    )
