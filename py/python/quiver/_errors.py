"""Exceptions raised by Quiver (all are ordinary ``Exception`` subclasses: a Rust panic is
turned into a ``StepError``, never a ``PanicException``)."""


class QuiverError(Exception):
    """Base class of Quiver's exceptions."""


class PlanError(QuiverError, ValueError):
    """The plan is invalid: unknown step type or parameter, missing or ambiguous input,
    cycle, duplicate label, wrong backend. The message names the step label and the key."""

    def __init__(self, message="", *args):
        # The command line's "plan error: " prefix: the class name says it already.
        if isinstance(message, str) and message.startswith(_PREFIX):
            message = message[len(_PREFIX) :]
        super().__init__(message, *args)


_PREFIX = "plan error: "


class StepError(QuiverError, RuntimeError):
    """A step failed while running: the message names the step label, the event range and,
    for a Python step, the Python traceback."""


class QuiverIOError(QuiverError, OSError):
    """A file could not be read or written."""


for _cls in (QuiverError, PlanError, StepError, QuiverIOError):
    _cls.__module__ = "quiver"  # tracebacks say quiver.PlanError, the name users import
