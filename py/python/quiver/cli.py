"""The ``quiver`` command inside this Python environment: the Rust command line, with
steps written in Python (``type = "python"``) available, plus two commands written in
Python: ``quiver reconstruct`` (a plan over a dataset on a Dask cluster, quiver.dask) and
``quiver query`` (SQL over a run's products, quiver.query)."""

import signal
import sys
import threading

from . import _quiver


def main(argv=None) -> int:
    """Runs ``quiver ARGS...``; returns the exit status (also used by ``python -m quiver``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and hasattr(signal, "SIGPIPE"):
        # The console command, as other Unix tools: `quiver steps | head -3` ends quietly
        # when the reader goes (Python ignores SIGPIPE, so the Rust printing would panic).
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        code = _command(args)
    except KeyboardInterrupt as e:
        # `quiver run` handles Ctrl-C itself (one line, nothing committed, exit 130); this
        # is an interrupt elsewhere (quiver reconstruct, quiver query): one line, no traceback.
        name = f"quiver {args[0]}" if args else "quiver"
        print(f"{name}: interrupted{getattr(e, 'note', '')}", file=sys.stderr)
        if args and args[0] == "reconstruct":
            # distributed's exit hook fails (with a traceback) to close a local cluster
            # interrupted while it started; what is left to do at exit is only cleanup.
            sys.unraisablehook = lambda unraisable: None
        code = 128 + getattr(e, "signum", signal.SIGINT)
    if argv is None:
        sys.exit(code)
    return code


class _Terminated(KeyboardInterrupt):
    signum = signal.SIGTERM


def _terminated(signum, frame):
    raise _Terminated()


def _command(args: list) -> int:
    if args and args[0] == "reconstruct":
        from .dask import main as command

        # SIGTERM as Ctrl-C: the client and the local cluster are closed on the way out.
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
        try:
            return command(args[1:])
        except KeyboardInterrupt as e:
            e.note = "; complete partitions stay in the output directory and a rerun skips them"
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    if args and args[0] == "query":
        from .query import main as command

        return command(args[1:])
    sys.stdout.flush()
    return _quiver.cli_main(["quiver", *args])
