"""Submit descriptions: parsed once, expanded into one job ad per proc (see the package)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from htgrid.submit._ad import Expr
from htgrid.submit._cluster import ClusterContext, ClusterProcs, ProcAd, Statement
from htgrid.submit._config import SubmitConfig
from htgrid.submit._errors import SubmitError
from htgrid.submit._lines import QueueStep, parse_description, run_shell
from htgrid.submit._macros import Expander
from htgrid.submit._queue import (
    FileItems,
    ForEach,
    QueueArgs,
    iterate_procs,
    load_items,
    parse_queue_args,
)

__all__ = [
    "ClusterProcs",
    "Job",
    "ProcAd",
    "SubmitDescription",
    "dry_run_chunks",
    "dry_run_text",
]


@dataclass(frozen=True, slots=True)
class Job:
    """One proc: its ids and its job ad (a `htgrid.classad.ClassAd`)."""

    cluster_id: int
    proc_id: int
    ad: Any
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ItemRow:
    """One row of queue item data: the loop variables of the procs it makes."""

    row: int
    values: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SubmitDescription:
    """A parsed submit description: its queue statements with their macros."""

    steps: tuple[QueueStep, ...]
    path: str | None
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_text(
        cls,
        text: str,
        path: str | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        config: SubmitConfig | None = None,
    ) -> SubmitDescription:
        """Parse submit text; `path` is used in error messages and for $(SUBMIT_FILE).

        `cwd` is the submit directory (relative includes, initialdir, executable);
        it defaults to the directory of `path`, else the current directory.
        """
        if cwd is None:
            cwd = str(Path(path).resolve().parent) if path else os.getcwd()
        environment = dict(env) if env is not None else {}
        cfg = config or SubmitConfig()
        defaults = _parse_defaults(cfg, path)
        steps = parse_description(
            text, path=path, cwd=cwd, defaults=defaults, env=environment, run_command=run_shell
        )
        return cls(tuple(steps), path, cwd, environment)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        config: SubmitConfig | None = None,
    ) -> SubmitDescription:
        """Read and parse a submit file."""
        file = Path(path)
        try:
            text = file.read_text()
        except OSError as exc:
            raise SubmitError(f"cannot read submit file: {exc.strerror}", path=str(file)) from None
        return cls.from_text(text, str(file), cwd=cwd, env=env, config=config)

    def jobs(
        self,
        cluster_id: int,
        *,
        owner: str,
        qdate: int,
        submit_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        config: SubmitConfig | None = None,
        check_files: bool = True,
        seed: int | None = None,
    ) -> list[Job]:
        """The job ads of one cluster; procs are numbered from 0 across all queue statements.

        `check_files` makes a missing executable or initialdir an error, as
        condor_submit does; `seed` fixes what $RANDOM_INTEGER() and
        $RANDOM_CHOICE() pick. Each ad is whole: for a large cluster, `procs` gives
        the cluster ad once and each proc's own attributes, one at a time.
        """
        cluster = self.procs(
            cluster_id,
            owner=owner,
            qdate=qdate,
            submit_dir=submit_dir,
            env=env,
            config=config,
            check_files=check_files,
            seed=seed,
        )
        return [
            Job(cluster_id, proc.proc_id, cluster.whole(proc), proc.warnings) for proc in cluster
        ]

    def procs(
        self,
        cluster_id: int,
        *,
        owner: str,
        qdate: int,
        submit_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        config: SubmitConfig | None = None,
        check_files: bool = True,
        seed: int | None = None,
        replay: bool = True,
    ) -> ClusterProcs:
        """The cluster as condor_submit sends it: `cluster_ad` (proc 0's ad, without
        ProcId), `count`, and, iterated once, each proc's own attributes (`ProcAd`),
        built as they are asked for. Proc 0 is built now: its errors are raised here.

        The arguments are those of `jobs`, whose ads are `whole(proc)` of these;
        `replay=False` builds every proc whole, running every step (slow: the reference
        the tests hold the replays to).
        """
        cfg = config or SubmitConfig()
        cwd = submit_dir or self.cwd
        environment = dict(env) if env is not None else dict(self.env)
        rng = random.Random(seed)
        statements = []
        for step in self.steps:
            expander = _expander(step, cfg, cluster_id, qdate, self.path, environment, rng)
            qargs = self._queue_args(step, expander)
            statements.append(Statement(step, expander, qargs, _load(qargs, step, cwd)))
        context = ClusterContext(
            cluster_id, owner, qdate, cwd, environment, cfg, check_files, rng, replay
        )
        return ClusterProcs(statements, context)

    def itemdata(
        self, *, submit_dir: str | None = None, config: SubmitConfig | None = None
    ) -> list[list[ItemRow]]:
        """For each queue statement, its selected item rows (the loop variable values)."""
        cfg = config or SubmitConfig()
        cwd = submit_dir or self.cwd
        out: list[list[ItemRow]] = []
        for step in self.steps:
            expander = _expander(step, cfg, 1, 0, self.path, dict(self.env), random.Random(0))
            qargs = self._queue_args(step, expander)
            items = _load(qargs, step, cwd)
            rows: dict[int, ItemRow] = {}
            for slot in iterate_procs(qargs, items):
                rows.setdefault(slot.row, ItemRow(slot.row, slot.values))
            out.append(list(rows.values()))
        return out

    @staticmethod
    def _queue_args(step: QueueStep, expander: Expander) -> QueueArgs:
        try:
            return parse_queue_args(expander.expand(step.args), step.inline_items)
        except SubmitError as exc:
            raise exc.at(step.path, step.line) from None


def _load(qargs: QueueArgs, step: QueueStep, cwd: str) -> Sequence[str]:
    try:
        items = load_items(qargs, cwd=cwd, run_command=run_shell)
    except SubmitError as exc:
        raise exc.at(step.path, step.line) from None
    if isinstance(items, FileItems):
        return items  # its lines checked as it counted them
    for number, item in enumerate(items, 1):
        if "\0" in item:
            raise SubmitError(
                f"item {number} of the queue statement holds a NUL character, which no job "
                "ad can hold",
                path=step.path,
                line=step.line,
            )
    return items


def _parse_defaults(cfg: SubmitConfig, path: str | None) -> dict[str, str]:
    defaults = _static_defaults(cfg)
    defaults.update({"Cluster": "1", "ClusterId": "1", "Process": "0", "ProcId": "0"})
    defaults.update({"Step": "0", "Row": "0", "ItemIndex": "0", "Node": ""})
    defaults["SUBMIT_FILE"] = path or ""
    return defaults


def _static_defaults(cfg: SubmitConfig) -> dict[str, str]:
    defaults = cfg.macro_defaults()
    defaults.update(
        {
            "JobId": "$(ClusterId).$(ProcId)",
            "Request_CPUs": "$(RequestCPUs)",
            "Request_Memory": "$(RequestMemory)",
            "VM_MEMORY": "$(Request_Memory)",
            "VM_VCPUS": "$(Request_CPUs)",
        }
    )
    return defaults


def _expander(
    step: QueueStep,
    cfg: SubmitConfig,
    cluster: int,
    qdate: int,
    path: str | None,
    env: Mapping[str, str],
    rng: random.Random,
) -> Expander:
    defaults = _static_defaults(cfg)
    moment = time.gmtime(qdate)
    defaults.update(
        {
            "Cluster": str(cluster),
            "ClusterId": str(cluster),
            "Process": "0",
            "ProcId": "0",
            "Step": "0",
            "Row": "0",
            "ItemIndex": "0",
            "Node": "",
            "SUBMIT_FILE": path or "",
            "SUBMIT_TIME": str(qdate),
            "Year": f"{moment.tm_year:04d}",
            "Month": f"{moment.tm_mon:02d}",
            "Day": f"{moment.tm_mday:02d}",
        }
    )
    return Expander(step.macros.copy(), defaults=defaults, env=env, rng=rng)


def _old_value(value: Any) -> str:
    return str(value)


def dry_run_text(jobs: list[Job]) -> str:
    """The job ads in old ClassAd syntax, one `Attr=value` per line, procs separated by blank lines.

    This is the shape of `condor_submit -dry-run` output (each proc printed in full).
    """
    blocks = (_dry_block(_dry_lines(job.ad).values()) for job in jobs)
    return "Dry-Run job(s)\n" + "\n\n".join(blocks) + "\n"


def dry_run_chunks(
    cluster: ClusterProcs, seen: Callable[[ProcAd], object] | None = None
) -> Iterator[str]:
    """`dry_run_text` of a cluster's procs, a proc at a time as they are built (the
    lines each proc shares with proc 0 are made once); `seen(proc)` is told of each."""
    yield "Dry-Run job(s)\n"
    first: dict[str, str] | None = None
    bases: dict[frozenset[str], list[str]] = {}  # proc 0's lines less those replaced
    for proc in cluster:
        if seen is not None:
            seen(proc)
        if first is None:
            first = _dry_lines(cluster.whole(proc))
            yield _dry_block(first.values())
            continue
        own = _dry_lines(proc.own)
        own["procid"] = f"ProcId={proc.proc_id}"
        names = frozenset(own)
        base = bases.get(names)
        if base is None:
            if len(bases) > 64:  # procs that differ in what they replace: rare, bounded
                bases.clear()
            base = bases[names] = [line for key, line in first.items() if key not in names]
        yield "\n\n" + _dry_block([*base, *own.values()])
    if first is not None:
        yield "\n"


def _dry_lines(ad: Any) -> dict[str, str]:
    """`Attr=value` of each attribute, by lower-case name."""
    lines = {}
    for line in ad.printOld().splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            lines[name.lower()] = f"{name}={value}"
    return lines


def _dry_block(lines: Iterable[str]) -> str:
    return "\n".join(sorted(lines, key=str.lower))


# Re-exported for callers that build ads by hand.
ForEach = ForEach
Expr = Expr
