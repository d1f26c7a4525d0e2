"""The ``quiver`` command inside this Python environment: the Rust command line, with
steps written in Python (``type = "python"``) available, plus two commands written in
Python: ``quiver reconstruct`` (a plan over a dataset on a Dask cluster, quiver.dask) and
``quiver query`` (SQL over a run's products, quiver.query)."""

import sys

from . import _quiver


def main(argv=None) -> int:
    """Runs ``quiver ARGS...``; returns the exit status (also used by ``python -m quiver``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("reconstruct", "query"):
        if args[0] == "reconstruct":
            from .dask import main as command
        else:
            from .query import main as command
        code = command(args[1:])
        if argv is None:
            sys.exit(code)
        return code
    sys.stdout.flush()
    code = _quiver.cli_main(["quiver", *args])
    if argv is None:
        sys.exit(code)
    return code
