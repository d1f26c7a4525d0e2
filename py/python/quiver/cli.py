"""The ``quiver`` command inside this Python environment: the Rust command line, with
steps written in Python (``type = "python"``) available."""

import sys

from . import _quiver


def main(argv=None) -> int:
    """Runs ``quiver ARGS...``; returns the exit status (also used by ``python -m quiver``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    code = _quiver.cli_main(["quiver", *args])
    if argv is None:
        sys.exit(code)
    return code
