"""Batch reconstruction on a Dask cluster.

:func:`reconstruct` splits a dataset into event ranges (partitions), runs the plan on each
in a Dask worker process, and writes each partition's products under
``output/part-<first>-<last>/`` (event numbers, inclusive, zero-padded), next to a
``manifest.json`` that says what made them::

    from distributed import Client, LocalCluster
    import quiver.dask

    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        summary = quiver.dask.reconstruct("plans/pixel.toml", "dataset/", "out/", client=client)
    print(summary)

What travels through the scheduler is the plan's TOML text and paths; each worker reads its
events from the dataset itself. Products that ``collect=`` asks for come back as
``pyarrow.Table`` objects (the Rust-side wrappers cannot be pickled).

Safety: a partition is written to a hidden ``output/.quiver-tmp-<first>-<last>.<host>-<pid>-<id>/``
directory and renamed to its final name when complete, so a directory ``part-*`` is always
complete; a worker killed mid-partition leaves only such a hidden directory, removed by the
next run once that process is gone (only names with this Quiver marker, of this host, of a
dead process or of this one, are ever removed). A rerun skips every partition whose
manifest records the same plan, dataset checksum, code version and events. If two attempts
of one partition finish (a worker thought dead that was not), the second finds the first's
directory and discards its own: there is exactly one copy. One ``reconstruct`` at a time per
output directory.

The output as a whole is described by ``output/quiver-reconstruct.json`` (plan hash, dataset
checksum, code version, every partition and its events, missing events, a ``complete``
flag). It is rewritten, not complete, before any partition is touched, and marked complete
only when every partition is: readers (:func:`quiver.open`, :func:`quiver.sql`,
``quiver query``) refuse an output whose manifest is missing or not complete, a partition
missing (naming its events), a gap, or a partition of another plan or dataset. An output
directory holding anything else (a ``quiver run`` output, a user's files) is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import tomllib
import uuid

from ._optional import MissingExtraError, require
from ._plan import SIDE_PRODUCTS

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
FORMAT = "quiver-partition/1"
# The manifest of the output as a whole, written last (see the module docstring).
OUTPUT_MANIFEST = "quiver-reconstruct.json"
OUTPUT_FORMAT = "quiver-reconstruct/1"
# Hidden names Quiver makes inside an output directory: `.quiver-<kind>-<what>.<host>-<pid>-<id>`,
# plus what the run of a partition adds to its temporary directory's name (the Rust run's
# staging directory `.<name>.quiver-staging-<host>-<pid>`, a failed run's `<name>.partial`).
# Nothing else is ever removed.
_OURS_RE = re.compile(
    r"^\.{1,2}quiver-(?:tmp|old|json)-[^.]+\.(?P<host>[A-Za-z0-9-]+?)-(?P<pid>\d+)-[0-9a-f]{12}(?:\..*)?$"
)
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"
# The default partitioning (:func:`default_partition_events`): about PARTITIONS_PER_SLOT
# partitions per worker thread, so that every worker has work and a slow partition is
# balanced by the others, of MIN_PARTITION_EVENTS events at least (a partition's fixed cost:
# the plan's setup, its own files) and MAX_PARTITION_EVENTS at most (what a retry redoes).
PARTITIONS_PER_SLOT = 4
MIN_PARTITION_EVENTS = 5
MAX_PARTITION_EVENTS = 50
_PART_RE = re.compile(r"^part-(\d+)-(\d+)$")
_PRODUCT_RE = re.compile(r"^[^.]+\.[^.]+\.(parquet|arrow)$")
# The manifest fields that must match for a partition to count as done.
_IDENTITY = ("plan_sha256", "dataset_checksum", "code_version", "first_event", "events")


class ReconstructError(RuntimeError):
    """The output directory or the inputs do not allow the run (the message says why)."""


def _hidden_name(kind: str, what: str) -> str:
    """A name for something Quiver makes inside an output directory (see ``_OURS_RE``)."""
    return f".quiver-{kind}-{what}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (taken to run when that cannot be known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _removable(name: str) -> bool:
    """Whether ``name`` is a leftover Quiver may remove: made by Quiver on this host, by a
    process that is gone or by this one."""
    m = _OURS_RE.match(name)
    if not m or m.group("host") != _HOST:
        return False
    pid = int(m.group("pid"))
    return pid == os.getpid() or not _alive(pid)


def _is_json_of(path: pathlib.Path, key: str, value=None) -> bool:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and key in obj and (value is None or obj[key] == value)


def check_output(out: pathlib.Path) -> None:
    """Refuses an output directory that holds anything :func:`reconstruct` did not write
    (a ``quiver run`` output, a user's files): it is never written into or cleaned."""
    if out.exists() and not out.is_dir():
        raise ReconstructError(
            f"the output directory {out} is an existing file, not a directory: "
            "choose another --output or remove the file"
        )
    if not out.is_dir():
        return
    foreign = []
    for e in sorted(out.iterdir(), key=lambda e: e.name):
        if _OURS_RE.match(e.name):
            continue
        if e.name == OUTPUT_MANIFEST and e.is_file() and _is_json_of(e, "format", OUTPUT_FORMAT):
            continue
        if e.name == SUMMARY and e.is_file() and _is_json_of(e, "events_total"):
            continue
        if (
            _PART_RE.match(e.name)
            and e.is_dir()
            and not e.is_symlink()
            and _is_json_of(e / MANIFEST, "format", FORMAT)
        ):
            continue
        foreign.append(e.name)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        what = (
            "a `quiver run` output (quiver-run.toml)"
            if "quiver-run.toml" in foreign
            else "files quiver reconstruct did not write"
        )
        raise ReconstructError(
            f"the output directory {out} holds {what}: {shown}; quiver reconstruct "
            "writes only into an empty directory or an earlier reconstruct output, "
            "and never removes what it did not write: choose another "
            "--output, or move those files away"
        )


@dataclasses.dataclass
class Summary:
    """What :func:`reconstruct` did."""

    output: str
    events: int
    """Events reconstructed by this call (skipped partitions not counted)."""
    events_total: int
    """Events covered by complete partitions after the call (skipped ones included)."""
    partitions: list
    """Every partition ``(first_event, events)`` of the request, in event order."""
    done: list
    """Partitions run by this call."""
    skipped: list
    """Partitions already complete, not run again."""
    failures: list
    """``{"partition": (first, events), "error": "..."}`` for each partition that failed
    after Dask's retries."""
    wall_s: float
    """Wall time of the call, from submission to the last result."""
    step_seconds: dict
    """Time spent in each step (by label), summed over partitions and workers."""
    workers: int
    manifests: list
    """The manifest of every partition run by this call."""
    products: dict = dataclasses.field(default_factory=dict)
    """The products asked for with ``collect=``, ``label:type -> pyarrow.Table`` (every
    requested partition, in event order)."""
    missing: list = dataclasses.field(default_factory=list)
    """Inclusive event ranges ``(first, last)`` the output lacks after the call (failed
    partitions, gaps between event ranges of several calls): readers refuse the output
    until a rerun fills them."""

    @property
    def throughput(self) -> float:
        """Events reconstructed per second of wall time."""
        return self.events / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        lines = [
            f"events {self.events} in {len(self.done)} partitions "
            f"({len(self.skipped)} already complete, "
            f"{len(self.failures)} failed)  workers {self.workers}  wall {self.wall_s:.3f} s  "
            f"throughput {self.throughput:.1f} events/s",
            f"output {self.output} ({self.events_total} events in complete partitions)",
        ]
        if self.missing:
            lines.append(
                "output INCOMPLETE, not readable until a rerun fills it: missing events "
                + ", ".join(f"{a} to {b}" for a, b in self.missing)
            )
        if self.step_seconds:
            total = sum(self.step_seconds.values()) or 1e-12
            lines += ["", f"{'step':<20} {'s (all workers)':>16} {'ms/event':>10} {'share':>7}"]
            for label, s in self.step_seconds.items():
                lines.append(
                    f"{label:<20} {s:>16.3f} {1e3 * s / max(self.events, 1):>10.3f} "
                    f"{100 * s / total:>6.1f}%"
                )
        for f in self.failures:
            first, n = f["partition"]
            lines.append(f"FAILED events {first}..{first + n}: {f['error']}")
        return "\n".join(lines)


def partitions(n_events: int, partition_events: int, first_event: int = 0) -> list[tuple[int, int]]:
    """Event ranges ``(first, count)`` of ``partition_events`` events (the last may be
    shorter) covering ``first_event .. first_event + n_events``. Partition boundaries are
    multiples of ``partition_events`` counted from ``first_event``."""
    if partition_events < 1:
        raise ValueError(f"partition_events must be at least 1 (got {partition_events})")
    return [
        (f, min(partition_events, first_event + n_events - f))
        for f in range(first_event, first_event + n_events, partition_events)
    ]


def default_partition_events(n_events: int, slots: int) -> int:
    """Events per partition when none is given: ``ceil(n_events / (slots * 4))`` (about
    4 partitions per worker thread ``slots``), at least 5 and at most 50. 20 events on
    2 workers make 4 partitions of 5; 100 events 8 of 13; 10 000 events 200 of 50."""
    per = -(-n_events // (max(slots, 1) * PARTITIONS_PER_SLOT))
    return max(MIN_PARTITION_EVENTS, min(MAX_PARTITION_EVENTS, per))


def _existing_partition_events(out: pathlib.Path) -> int | None:
    """The partition size of an earlier reconstruct output (its longest partition), so that
    a rerun with the default finds the same partitions whatever the cluster's size."""
    sizes = [last - first + 1 for first, last, _ in complete_parts(out)]
    return max(sizes) if sizes else None


def part_name(first: int, events: int) -> str:
    """The directory of a partition: ``part-<first>-<last>`` (inclusive, 8 digits or more)."""
    return f"part-{first:08d}-{first + events - 1:08d}"


def dataset_info(dataset) -> tuple[int, str]:
    """``(events, checksum)`` of a dataset directory. The checksum is the SHA-256 of its
    ``manifest.toml``, which itself lists the SHA-256 of every file of the dataset: cheap,
    and it changes whenever any file does."""
    path = pathlib.Path(dataset) / "manifest.toml"
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ReconstructError(
            f"dataset {dataset}: cannot read {path} ({e.strerror}); "
            "make one with `quiver generate --output DIR`"
        ) from None
    try:
        events = int(tomllib.loads(raw.decode())["events"])
    except (KeyError, ValueError, tomllib.TOMLDecodeError) as e:
        raise ReconstructError(f"dataset {dataset}: {path} has no valid `events` ({e})") from None
    return events, "sha256:" + hashlib.sha256(raw).hexdigest()


def code_version() -> str:
    """``quiver.__version__``, plus ``git describe`` of the package's source tree when it is
    a git checkout (an editable install)."""
    from . import __version__

    here = pathlib.Path(__file__).resolve().parent
    try:
        r = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--tags"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if r.returncode == 0 and r.stdout.strip():
            return f"{__version__}+{r.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return __version__


def _plan_text(plan) -> tuple[str, str]:
    """``(toml_text, origin)`` of a plan given as a path or as TOML text."""
    if isinstance(plan, os.PathLike) or (
        isinstance(plan, str) and "\n" not in plan and "[[step]]" not in plan
    ):
        p = pathlib.Path(plan)
        try:
            return p.read_text(), str(p.resolve())
        except OSError as e:
            raise ReconstructError(f"plan {plan}: {e.strerror}") from None
    if isinstance(plan, str):
        return plan, "<plan text>"
    raise TypeError(
        "plan must be a path to a TOML plan or the TOML text "
        f"(a quiver.Plan object cannot be shipped to workers), not {type(plan).__name__}"
    )


def _writes_products(text: str, origin: str) -> bool:
    try:
        steps = tomllib.loads(text).get("step", [])
    except tomllib.TOMLDecodeError as e:
        raise ReconstructError(f"plan {origin}: not valid TOML ({e})") from None
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ReconstructError(f"plan {origin}: `step` must be a list of [[step]] tables")
    return any(s.get("type") in ("write_parquet", "write_ipc") for s in steps)


def read_manifest(part_dir) -> dict | None:
    """The manifest of a partition directory, or None when it has none (or a broken one)."""
    try:
        return json.loads((pathlib.Path(part_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def run_ok(part_dir, checksums: bool = True) -> bool:
    """Whether a partition directory holds a complete run: its run manifest
    (``quiver-run.toml``) matches its files, sizes and (with ``checksums``) checksums."""
    from .query import QueryError, verified

    try:
        verified(part_dir, checksums=checksums)
        return True
    except QueryError:
        return False


def complete_parts(output) -> list[tuple[int, int, pathlib.Path]]:
    """``(first, last, dir)`` of every ``part-*`` directory of ``output``, in event order."""
    out = pathlib.Path(output)
    parts = []
    if out.is_dir():
        for d in out.iterdir():
            m = _PART_RE.match(d.name)
            if m and d.is_dir():
                parts.append((int(m.group(1)), int(m.group(2)), d))
    return sorted(parts)


def _tune_malloc() -> None:
    """Undoes, in this worker process, the allocator setting Dask's nanny starts workers with
    (``MALLOC_TRIM_THRESHOLD_=65536``): the ``quiver`` command's settings, whatever the
    environment says (quiver_columnar::tune::tune_malloc_always; the chain ran 35 % slower
    in a worker without them). A no-op off glibc."""
    from . import _quiver

    _quiver.tune_malloc(always=True)


def run_partition(
    plan_text: str,
    plan_origin: str,
    dataset: str,
    output: str,
    first: int,
    events: int,
    identity: dict,
    threads: int = 1,
    batch_size: int | None = None,
    collect: list | None = None,
    overwrite: bool = False,
):
    """Runs one partition in this process (what a Dask task does); returns
    ``(manifest, {label:type -> pyarrow.Table})``.

    The products are written to a hidden temporary directory (``.quiver-tmp-…``) renamed to
    ``output/part-<first>-<last>/`` once the run and the manifest are complete."""
    import pyarrow as pa

    import quiver

    _tune_malloc()
    out = pathlib.Path(output)
    name = part_name(first, events)
    final = out / name
    existing = read_manifest(final)
    damaged = existing is not None and not run_ok(final)
    if (
        existing is not None
        and not damaged
        and all(existing.get(k) == identity[k] for k in _IDENTITY)
    ):
        return dict(existing, duplicate=True), {}  # a previous attempt finished: keep it
    tmp = out / _hidden_name("tmp", f"{first:08d}-{first + events - 1:08d}")
    tmp.mkdir(parents=True)
    try:
        started = time.time()
        plan = quiver.Plan.from_toml(plan_text, plan_origin)
        result = plan.run(
            first_event=first,
            events=events,
            threads=threads,
            batch_size=batch_size,
            input=dataset,
            output=str(tmp),
            collect=list(collect or []),
        )
        tables = {k: pa.table(result.table(k)) for k in (collect or [])}
        manifest = {
            "format": FORMAT,
            **identity,
            "last_event": first + events - 1,
            "plan_origin": plan_origin,
            "dataset": str(dataset),
            "threads": result.numbers.get("threads"),
            "batch_size": result.numbers.get("batch_size"),
            "wall_s": result.numbers.get("wall_s"),
            "step_seconds": dict(result.numbers["step_s"]),
            "files": {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()},
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": started,
            "finished": time.time(),
        }
        if result.numbers.get("events") != events:
            raise ReconstructError(
                f"partition {name}: the plan ran {result.numbers.get('events')} events, "
                f"expected {events}"
            )
        products = [f for f in manifest["files"] if _PRODUCT_RE.match(f)]
        partial = [f for f in manifest["files"] if f.endswith(".partial") or ".tmp-" in f]
        if not products or partial:
            raise ReconstructError(
                f"partition {name}: the run wrote "
                f"{'incomplete files ' + ', '.join(partial) if partial else 'no product file'}"
            )
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.rename(tmp, final)  # atomic: the directory appears complete or not at all
        except OSError:
            existing = read_manifest(final)
            if (
                existing is not None
                and all(existing.get(k) == identity[k] for k in _IDENTITY)
                and run_ok(final)
            ):
                shutil.rmtree(tmp, ignore_errors=True)  # another attempt won: one copy only
                return dict(existing, duplicate=True), {}
            if not (overwrite or damaged) or not final.exists():
                raise
            trash = out / _hidden_name("old", name)
            os.rename(final, trash)
            os.rename(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        return manifest, tables
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        # A failed run keeps its files in <tmp>.partial; the partition will be run again.
        shutil.rmtree(tmp.with_name(tmp.name + ".partial"), ignore_errors=True)
        raise


def _cleanup_temp(out: pathlib.Path) -> None:
    """Removes what killed attempts left in ``out`` (see :func:`_removable`); nothing else."""
    for d in out.iterdir():
        if _removable(d.name):
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink(missing_ok=True)


def reconstruct(
    plan,
    dataset,
    output,
    *,
    client=None,
    events: int | None = None,
    first_event: int = 0,
    partition_events: int | None = None,
    threads: int = 1,
    batch_size: int | None = None,
    retries: int = 2,
    collect: list | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> Summary:
    """Runs ``plan`` over ``dataset`` on a Dask cluster and writes the products under ``output``.

    - ``plan``: path to a TOML plan, or its text; it must write its products
      (a ``write_parquet`` or ``write_ipc`` step). Python steps must be importable on the
      workers (a module, or a ``.py`` path valid in the workers' working directory).
    - ``dataset``: a dataset directory (``quiver generate``); ``output``: the output directory.
    - ``client``: a ``distributed.Client``; ``None`` uses the current default client.
    - ``events``, ``first_event``: the events to run (default: all of the dataset).
    - ``partition_events``: events per partition. Default: the partitioning of the
      partitions already in ``output`` when there are any (so that reruns find the same
      partitions), otherwise :func:`default_partition_events` of the events and the
      cluster's worker threads (about 4 partitions per thread, 5 to 50 events each).
      Partition names depend only on this and the event range.
    - ``threads``, ``batch_size``: of each partition's run (default: 1 thread per task; give
      workers one Dask thread each and scale with processes).
    - ``retries``: Dask retries of a partition that raised (a worker that died is
      rescheduled by Dask on its own, up to ``distributed.scheduler.allowed-failures``).
    - ``collect``: products to return as ``pyarrow.Table`` (``"label"`` or
      ``"label:type"``); from skipped partitions they are read from their files.
    - ``overwrite``: replace the whole output when it was made by another plan, dataset or
      code version, or partitioned otherwise; without it, such an output is an error. The
      output's manifest says "not complete" until every partition is redone.
    - ``progress``: while the partitions run, a line on stderr with the partitions done,
      running and failed, the events done, their rate and the time left, when stderr is a
      terminal (never into a pipe, a file or a notebook).

    Counts below 1 (``events``, ``partition_events``, ``threads``, ``batch_size``), a
    negative ``first_event`` or ``retries``, and ``events`` beyond the dataset are errors
    (:class:`ReconstructError`), as is an output directory holding anything reconstruct
    did not write. Numbers must be integers.

    Returns a :class:`Summary`; partitions that failed are listed in ``summary.failures``
    rather than raised."""
    default_client = require("distributed", extra="dask").default_client

    _check_numbers(
        events=events,
        first_event=first_event,
        partition_events=partition_events,
        threads=threads,
        batch_size=batch_size,
        retries=retries,
    )
    client = client or default_client()
    text, origin = _plan_text(plan)
    if not _writes_products(text, origin):
        raise ReconstructError(f"plan {origin}: it writes no products; add a `write_parquet` step")
    dataset = str(pathlib.Path(dataset).resolve())
    n_available, checksum = dataset_info(dataset)
    if first_event >= n_available:
        raise ReconstructError(
            f"first_event {first_event} is outside the dataset's {n_available} events"
        )
    if events is not None and events > n_available - first_event:
        raise ReconstructError(
            f"events {events} from event {first_event}: the dataset {dataset} has "
            f"{n_available} events (events {first_event} to {n_available - 1} remain)"
        )
    n = n_available - first_event if events is None else events
    out = pathlib.Path(output).resolve()
    check_output(out)
    if partition_events is None:
        partition_events = _existing_partition_events(out) or default_partition_events(
            n, _n_slots(client)
        )
    wanted = partitions(n, partition_events, first_event)
    out.mkdir(parents=True, exist_ok=True)
    identity_base = {
        "plan_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "dataset_checksum": checksum,
        "code_version": code_version(),
    }

    # Partitions already there: complete and matching (skip), stale, or of another partitioning.
    by_range = {(f, f + k - 1): (f, k) for f, k in wanted}
    todo, skipped, remove, kept = [], [], [], []
    existing = {(first, last): d for first, last, d in complete_parts(out)}
    for (first, last), d in existing.items():
        if (first, last) in by_range:
            continue
        if any(first <= b and a <= last for a, b in by_range):
            if not overwrite:
                raise ReconstructError(
                    f"{d} overlaps the partitions of this run "
                    f"(partition_events={partition_events}); "
                    "use the same partition_events, another output, or overwrite=True"
                )
            remove.append(d)
            continue
        # Outside this request: kept only when it is of the same plan, dataset and code.
        m = read_manifest(d) or {}
        diff = [key for key in _IDENTITY[:3] if m.get(key) != identity_base[key]]
        if not diff:
            kept.append((first, last - first + 1))
        elif not overwrite:
            raise ReconstructError(
                f"{d} was made with another {', '.join(diff)}; one output holds one plan "
                "over one dataset: use another output or overwrite=True (which replaces it)"
            )
        else:
            remove.append(d)
    for f, k in wanted:
        ident = dict(identity_base, first_event=f, events=k)
        m = read_manifest(out / part_name(f, k)) if (f, f + k - 1) in existing else None
        complete = m is not None and run_ok(out / part_name(f, k))
        if complete and all(m.get(key) == ident[key] for key in _IDENTITY):
            skipped.append((f, k))
            continue
        if complete and not overwrite:
            diff = [key for key in _IDENTITY if m.get(key) != ident[key]]
            raise ReconstructError(
                f"{out / part_name(f, k)} was made with another {', '.join(diff)}; "
                "use another output or overwrite=True"
            )
        todo.append((f, k, ident))

    # The output's manifest says "not complete" before any partition changes, so that no
    # reader takes a half-replaced or half-made output for a run.
    listed = sorted(set(wanted) | set(kept))
    manifest_base = {
        "format": OUTPUT_FORMAT,
        **identity_base,
        "dataset": dataset,
        "plan_origin": origin,
    }
    if todo or remove or not (out / OUTPUT_MANIFEST).exists():
        _write_output_manifest(out, manifest_base, listed, complete=False)
    for d in remove:
        trash = out / _hidden_name("old", d.name)
        os.rename(d, trash)
        shutil.rmtree(trash, ignore_errors=True)

    started = time.perf_counter()
    futures = {
        (f, k): client.submit(
            run_partition,
            text,
            origin,
            dataset,
            str(out),
            f,
            k,
            ident,
            threads,
            batch_size,
            collect,
            overwrite,
            pure=False,
            retries=retries,
            key=f"quiver-{part_name(f, k)}-{uuid.uuid4().hex[:8]}",
        )
        for f, k, ident in todo
    }
    if progress and futures and _stderr_is_terminal():
        _show_progress(client, futures, started)
    manifests, failures, tables = [], [], {}
    for part, fut in futures.items():
        try:
            m, t = fut.result()
        except Exception as e:  # the partition failed after its retries
            failures.append({"partition": part, "error": f"{type(e).__name__}: {e}"})
            continue
        manifests.append(m)
        tables[part] = t
    wall = time.perf_counter() - started
    _cleanup_temp(out)
    # Every partition must hold the same files (a plan or code change would show here).
    file_sets = {}
    for f, k in wanted:
        m = read_manifest(out / part_name(f, k))
        if m is not None:
            file_sets.setdefault(tuple(sorted(m.get("files", {}))), []).append((f, k))
    if len(file_sets) > 1:
        common = max(file_sets, key=lambda fs: len(file_sets[fs]))
        for fs, parts in file_sets.items():
            if fs != common:
                for part in parts:
                    failures.append(
                        {
                            "partition": part,
                            "error": f"its files {sorted(set(fs) ^ set(common))} differ "
                            "from the other partitions'",
                        }
                    )

    products = {}
    if collect:
        import pyarrow as pa
        import pyarrow.parquet as pq

        for sel in collect:
            chunks = []
            for part in wanted:
                if part in tables:
                    chunks.append(tables[part][sel])
                elif part in skipped:
                    chunks.append(pq.read_table(_product_file(out / part_name(*part), sel)))
            products[sel] = pa.concat_tables(chunks, promote_options="none") if chunks else None

    step_seconds = {}
    for m in manifests:
        if not m.get("duplicate"):
            for label, s in m.get("step_seconds", {}).items():
                step_seconds[label] = step_seconds.get(label, 0.0) + s
    done = [(m["first_event"], m["events"]) for m in manifests]
    workers = _n_workers(client)
    summary = Summary(
        output=str(out),
        events=sum(k for _, k in done),
        events_total=sum(k for _, k in done + skipped),
        partitions=wanted,
        done=done,
        skipped=skipped,
        failures=failures,
        wall_s=wall,
        step_seconds=step_seconds,
        workers=workers,
        manifests=manifests,
        products=products,
    )
    summary.missing = _write_output_manifest(out, manifest_base, listed, complete=None)
    _write_json(
        out / SUMMARY,
        {
            "events": summary.events,
            "events_total": summary.events_total,
            "wall_s": wall,
            "throughput": summary.throughput,
            "workers": workers,
            "partitions": wanted,
            "skipped": skipped,
            "failures": failures,
            "step_seconds": step_seconds,
            "dataset": dataset,
            "plan_origin": origin,
            **identity_base,
        },
    )
    return summary


def _missing_ranges(out: pathlib.Path, listed, identity: dict) -> list[tuple[int, int]]:
    """Inclusive event ranges of ``listed`` partitions not complete in ``out`` with
    ``identity`` (plan, dataset, code), and of the gaps between them. Files are checked by
    size only (readers check their checksums), so that writing the output's manifest does
    not read every product again."""
    missing = []
    for i, (f, k) in enumerate(listed):
        d = out / part_name(f, k)
        m = read_manifest(d)
        ok = (
            m is not None
            and all(m.get(key) == identity[key] for key in _IDENTITY[:3])
            and m.get("first_event") == f
            and m.get("events") == k
            and run_ok(d, checksums=False)
        )
        if not ok:
            missing.append((f, f + k - 1))
        if i + 1 < len(listed) and listed[i + 1][0] > f + k:
            missing.append((f + k, listed[i + 1][0] - 1))
    merged = []
    for a, b in missing:
        if merged and merged[-1][1] + 1 >= a:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _write_output_manifest(out: pathlib.Path, base: dict, listed, *, complete: bool | None) -> list:
    """Writes ``OUTPUT_MANIFEST``; ``complete=None``: complete when no event is missing.
    Returns the missing event ranges."""
    missing = _missing_ranges(out, listed, base)
    first = listed[0][0] if listed else 0
    _write_json(
        out / OUTPUT_MANIFEST,
        {
            **base,
            "complete": (not missing) if complete is None else complete,
            "first_event": first,
            "events": (listed[-1][0] + listed[-1][1] - first) if listed else 0,
            "partitions": [
                {"name": part_name(f, k), "first_event": f, "events": k} for f, k in listed
            ],
            "missing_events": [list(r) for r in missing],
            "written": time.time(),
        },
    )
    return missing


def _check_numbers(**values) -> None:
    """Clear errors for numbers that mean nothing (a count below 1, a negative event,
    a value too large for any run)."""
    minimum = {"first_event": 0, "retries": 0}
    maximum = {"threads": 1024, "retries": 1000, "workers": 1024}
    for name, v in values.items():
        if v is None:
            continue
        try:
            if isinstance(v, bool):
                raise TypeError
            v = operator.index(v)
        except TypeError:
            raise ReconstructError(f"{name} must be an integer, not {v!r}") from None
        lo, hi = minimum.get(name, 1), maximum.get(name, 2**53)
        if not lo <= v <= hi:
            raise ReconstructError(f"{name} must be from {lo} to {hi} (got {v})")


def _workers(client) -> dict:
    try:
        info = client.scheduler_info(n_workers=-1)  # newer distributed lists only a few by default
    except TypeError:
        info = client.scheduler_info()
    return info.get("workers", {})


def _n_workers(client) -> int:
    return len(_workers(client))


def _n_slots(client) -> int:
    """Tasks the cluster runs at once: its workers' threads (1 while it has no worker)."""
    return max(1, sum(int(w.get("nthreads", 1)) for w in _workers(client).values()))


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _show_progress(client, futures: dict, started: float) -> None:
    """Until every partition has finished or failed, redraws one line on stderr (a terminal):
    partitions done/running/failed, events done, rate and time left; then clears it."""
    import sys

    n_parts, n_events = len(futures), sum(k for _, k in futures)
    slots = _n_slots(client)
    keys = {fut.key: part for part, fut in futures.items()}
    width = 0
    try:
        while True:
            states = [fut.status for fut in futures.values()]
            done = [part for part, st in zip(futures, states) if st == "finished"]
            failed = states.count("error") + states.count("cancelled")
            if len(done) + failed >= n_parts:
                break
            try:
                running = sum(1 for ks in client.processing().values() for k in ks if k in keys)
            except Exception:  # a scheduler that does not answer: the line goes on without it
                running = 0
            events_done = sum(k for _, k in done)
            elapsed = time.perf_counter() - started
            rate = events_done / elapsed if elapsed > 0 else 0.0
            eta = f"{(n_events - events_done) / rate:.0f}s" if rate > 0 else "?"
            filled = 30 * (len(done) + failed) // n_parts
            line = (
                f"[{'#' * filled}{'-' * (30 - filled)}] {len(done)}/{n_parts} partitions  "
                f"{min(running, slots)} running  {failed} failed  {events_done}/{n_events} events  "
                f"{rate:.1f} events/s  eta {eta}"
            )
            width = max(width, len(line))
            sys.stderr.write("\r" + line.ljust(width))
            sys.stderr.flush()
            time.sleep(0.25)
    finally:  # also on Ctrl-C, so that the command's one-line message starts a clean line
        sys.stderr.write("\r" + " " * width + "\r")
        sys.stderr.flush()


def _product_file(part_dir: pathlib.Path, sel: str) -> pathlib.Path:
    """The file of product ``label`` or ``label:type`` in a partition directory."""
    label, _, ty = sel.partition(":")
    found = [
        p
        for p in part_dir.glob(f"*.{label}.parquet")
        if not ty or p.name == f"{ty}.{label}.parquet"
    ]
    if not ty and len(found) > 1:
        found = [p for p in found if p.name.split(".")[0] not in SIDE_PRODUCTS] or found
    if len(found) != 1:
        raise ReconstructError(
            f"{part_dir}: product '{sel}' is {'ambiguous' if found else 'not written'}"
        )
    return found[0]


def _write_json(path: pathlib.Path, obj) -> None:
    tmp = path.with_name(_hidden_name("json", path.stem))
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv=None) -> int:
    """``quiver reconstruct PLAN --input DATASET --output DIR [...]``: :func:`reconstruct` on
    a Dask cluster (``--scheduler ADDRESS``) or on a local cluster of ``--workers`` processes."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="quiver reconstruct",
        description=(
            "Run a plan over a dataset on a Dask cluster, one partition (event range) per task; "
            "products under OUTPUT/part-<first>-<last>/. Reruns skip complete partitions."
        ),
    )
    ap.add_argument("plan", help="TOML plan (it must have a write_parquet step)")
    ap.add_argument("--input", required=True, metavar="DIR", help="dataset directory")
    ap.add_argument("--output", required=True, metavar="DIR", help="output directory")
    ap.add_argument(
        "--scheduler", metavar="ADDRESS", help="Dask scheduler (default: a local cluster)"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help="local cluster: worker processes (default 2)",
    )
    ap.add_argument("--events", type=int, metavar="N", help="events to run (default: all)")
    ap.add_argument("--first-event", type=int, default=0, metavar="N")
    ap.add_argument(
        "--partition-events",
        type=int,
        metavar="N",
        help="events per partition (default: an earlier output's, else about 4 partitions "
        f"per worker thread, {MIN_PARTITION_EVENTS} to {MAX_PARTITION_EVENTS} events each)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="T",
        help="threads of each partition's run (default 1)",
    )
    ap.add_argument("--batch-size", type=int, metavar="B")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--overwrite", action="store_true", help="replace partitions made otherwise")
    ap.add_argument("--no-progress", action="store_true", help="never draw a progress line")
    a = ap.parse_args(argv)

    try:
        _check_numbers(workers=a.workers)
        distributed = require("distributed", extra="dask")
        Client, LocalCluster = distributed.Client, distributed.LocalCluster
        if a.scheduler:
            cluster, client = None, Client(a.scheduler)
        else:
            cluster = LocalCluster(
                n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
            )
            client = Client(cluster)
        try:
            s = reconstruct(
                a.plan,
                a.input,
                a.output,
                client=client,
                events=a.events,
                first_event=a.first_event,
                partition_events=a.partition_events,
                threads=a.threads,
                batch_size=a.batch_size,
                retries=a.retries,
                overwrite=a.overwrite,
                progress=not a.no_progress,
            )
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    except (ReconstructError, OSError, MissingExtraError) as e:
        print(f"error: {e}")
        return 2
    print(s)
    return 0 if s.ok else 1
