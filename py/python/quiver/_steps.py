"""Steps written in Python: the :class:`Step` base class, the :func:`polars_step` decorator,
and how the Rust side finds a step class (``module`` + ``class`` of a plan step)."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import types

from ._errors import PlanError

_KINDS = {bool: "bool", int: "int", float: "float", str: "str", list: "list"}


class Step:
    """Base class of a step written in Python.

    Declare what the step reads and writes, and implement :meth:`produce`::

        class Scale(quiver.Step):
            consumes = {"input": "floats"}        # input slot -> product type
            produces = ["floats"]                 # product types published under the label
            params = {"factor": 2.0}              # name -> default (or a type: required)

            def produce(self, batch):
                x = batch.get("input", event=False).column("value").to_numpy()
                y = x * np.float32(self.params["factor"])
                batch.put("floats", {"value": y}, offsets="input")

    ``consumes`` values are a product type, or ``[type]`` for a list of products. ``produces``
    is a list of types, or a dict ``type -> pyarrow.Schema`` to have the columns checked.
    ``params`` values are defaults (their type is the parameter's type), a type (``float``)
    for a required parameter, or ``(default, "doc")``. The plan's values reach the
    constructor as a dict. One instance is made per worker thread. An optional ``end_job()``
    is called once per instance at the end of a successful job; a string it returns is
    printed in the run summary.
    """

    consumes: dict = {}
    produces: list | dict = []
    params: dict = {}

    def __init__(self, params: dict):
        self.params = dict(params)

    def produce(self, batch) -> None:  # pragma: no cover - overridden
        raise NotImplementedError(f"{type(self).__name__}.produce(batch) is not implemented")


def polars_step(*, consumes: dict, produces: str | list | dict, params: dict | None = None):
    """Turns a function of Polars DataFrames into a step.

    The function receives one ``polars.DataFrame`` per input slot (keyword arguments named
    after the slots, each with an ``event`` column) and the parameters (keywords), and
    returns a DataFrame with an ``event`` column (rows ordered by event) — or a dict
    ``type -> DataFrame`` when it produces several types::

        @quiver.polars_step(consumes={"x": "floats"}, produces="floats")
        def square(x):
            return x.select("event", (pl.col("value") * pl.col("value")).alias("value"))

    The decorated name is a :class:`Step` class (use it in ``Plan.add`` or as ``class`` in
    TOML); the plain function stays available as ``square.fn``.
    """
    out_types = [produces] if isinstance(produces, str) else list(produces)

    def wrap(fn):
        def produce(self, batch):
            frames = {slot: batch.polars(slot) for slot in type(self).consumes}
            out = fn(**frames, **self.params)
            if isinstance(out, dict):
                for ty, df in out.items():
                    batch.put(ty, df)
            elif len(out_types) == 1:
                batch.put(out_types[0], out)
            else:
                raise TypeError(
                    f"{fn.__name__} produces {out_types}: return a dict type -> DataFrame"
                )

        cls = type(
            fn.__name__,
            (Step,),
            {
                "consumes": dict(consumes),
                "produces": produces if isinstance(produces, dict) else out_types,
                "params": dict(params or {}),
                "produce": produce,
                "fn": staticmethod(fn),
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
                "__qualname__": fn.__qualname__,
            },
        )
        return cls

    return wrap


# Classes handed to Plan.add as objects: found by (module, qualname) without importing.
_LOCAL: dict[tuple[str, str], type] = {}
_FILES: dict[str, object] = {}


def register_class(cls: type) -> tuple[str, str]:
    """Makes a class given as an object findable by the Rust side; returns (module, class)."""
    if not (isinstance(cls, type) and issubclass(cls, Step)):
        raise TypeError(f"{cls!r} is not a quiver.Step subclass (or a @polars_step function)")
    key = (cls.__module__, cls.__qualname__)
    if _LOCAL.get(key, cls) is not cls:
        # Another class of the same name (e.g. made in a loop): keep both apart.
        key = (cls.__module__, f"{cls.__qualname__}@{id(cls):x}")
    _LOCAL[key] = cls
    return key


def _import(module: str):
    if module.endswith(".py") or os.sep in module:
        path = os.path.abspath(module)
        if path not in _FILES:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"no Python file '{module}' (looked at {path})")
            name = "quiver_user_" + hashlib.sha1(path.encode()).hexdigest()[:12]
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            _FILES[path] = mod
        return _FILES[path]
    return importlib.import_module(module)


def _did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? " if close else ""


def _step_classes(mod) -> list[str]:
    return [
        n
        for n, v in vars(mod).items()
        if isinstance(v, type) and issubclass(v, Step) and v is not Step
    ]


def _import_or_plan_error(module: str):
    """``_import``, with a misspelled module or file as a one-line PlanError; a module that
    fails while importing keeps its own exception (and traceback)."""
    try:
        return _import(module)
    except FileNotFoundError as e:
        raise PlanError(f"parameter 'module': {e}") from None
    except ModuleNotFoundError as e:
        if not e.name or not (module == e.name or module.startswith(e.name + ".")):
            raise  # the module itself imports something missing
        parent, _, _ = e.name.rpartition(".")
        hint = ""
        if parent:
            try:
                path = importlib.import_module(parent).__path__
                hint = _did_you_mean(
                    e.name, (f"{parent}.{m.name}" for m in pkgutil.iter_modules(path))
                )
            except (ImportError, AttributeError):
                pass
        raise PlanError(
            f"parameter 'module': no Python module '{module}' ({hint}"
            f"a module importable here, or a path to a .py file)"
        ) from None


def load(module: str, class_name: str) -> type:
    """The step class ``class_name`` of ``module`` (a file path or an importable module)."""
    cls = _LOCAL.get((module, class_name))
    if cls is None:
        obj = _import_or_plan_error(module)
        for part in class_name.split("."):
            if not hasattr(obj, part):
                found = (
                    ", ".join(sorted(_step_classes(obj)))
                    if isinstance(obj, types.ModuleType)
                    else ""
                )
                hint = _did_you_mean(class_name, found.split(", ") if found else [])
                raise PlanError(
                    f"parameter 'class': '{module}' has no '{class_name}' ({hint}"
                    f"its step classes: {found or 'none'})"
                )
            obj = getattr(obj, part)
        cls = obj
    if not (isinstance(cls, type) and issubclass(cls, Step)):
        raise PlanError(
            f"parameter 'class': '{class_name}' in '{module}' is not a quiver.Step subclass "
            f"(or a @polars_step function)"
        )
    return cls


def _param(name, decl):
    doc = ""
    if isinstance(decl, tuple):
        decl, doc = decl
    if isinstance(decl, type):
        if decl not in _KINDS:
            raise TypeError(
                f"parameter '{name}': type {decl.__name__} is not one of bool, int, float, str, "
                "list"
            )
        return (name, _KINDS[decl], None, doc)
    for t in (bool, int, float, str, list):  # bool before int: True is an int
        if isinstance(decl, t):
            return (name, _KINDS[t], decl, doc)
    raise TypeError(
        f"parameter '{name}': default {decl!r} is not a bool, int, float, str or list of str"
    )


def describe(module: str, class_name: str) -> dict:
    """What the class declares, normalised for the Rust side."""
    cls = load(module, class_name)
    consumes = []
    for slot, ty in dict(cls.consumes).items():
        many = isinstance(ty, (list, tuple))
        if many:
            (ty,) = ty
        if not isinstance(ty, str):
            raise TypeError(
                f"{class_name}.consumes['{slot}'] must be a product type name (str) or [type]"
            )
        consumes.append((slot, ty, many))
    produces = cls.produces
    if isinstance(produces, str):
        produces = [produces]
    if isinstance(produces, dict):
        produces = list(produces.items())
    else:
        produces = [(ty, None) for ty in produces]
    params = [_param(k, v) for k, v in dict(cls.params).items()]
    return {"consumes": consumes, "produces": produces, "params": params}
