"""Submit descriptions: parsed once, expanded into one job ad per proc (see the package)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from htgrid.submit._ad import Expr, JobAd
from htgrid.submit._config import SubmitConfig
from htgrid.submit._errors import SubmitError
from htgrid.submit._jobad import JobBuilder, Universe
from htgrid.submit._lines import QueueStep, parse_description, run_shell
from htgrid.submit._macros import Expander
from htgrid.submit._queue import ForEach, QueueArgs, iterate_procs, load_items, parse_queue_args

__all__ = ["Job", "SubmitDescription", "dry_run_text"]


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
        $RANDOM_CHOICE() pick.
        """
        cfg = config or SubmitConfig()
        cwd = submit_dir or self.cwd
        environment = dict(env) if env is not None else dict(self.env)
        rng = random.Random(seed)
        jobs: list[Job] = []
        first: JobAd | None = None
        for step in self.steps:
            expander = _expander(step, cfg, cluster_id, qdate, self.path, environment, rng)
            qargs = self._queue_args(step, expander)
            items = _load(qargs, step, cwd)
            for slot in iterate_procs(qargs, items):
                proc = len(jobs)
                expander.set_default("Process", str(proc))
                expander.set_default("ProcId", str(proc))
                expander.set_default("Step", str(slot.step))
                expander.set_default("Row", str(slot.row))
                expander.set_default("ItemIndex", str(slot.row))
                for name, value in slot.values:
                    expander.macros.set(name, value)
                builder = JobBuilder(
                    expander,
                    cfg,
                    cluster_id,
                    proc,
                    qdate,
                    cwd,
                    owner,
                    Universe(),
                    environment,
                    check_files=check_files,
                )
                if first is not None:
                    # condor_submit chains procs 1..N to the proc 0 ad
                    for attr, attr_value in first.items():
                        builder.ad[attr] = attr_value
                try:
                    ad = builder.build()
                    bad = ad.nul_attribute()
                    if bad is not None:  # from queue items or a command's output
                        raise SubmitError(
                            f"job {cluster_id}.{proc}: {bad} holds a NUL character, which "
                            "no job ad can hold"
                        )
                except SubmitError as exc:
                    raise exc.at(step.path, step.line) from None
                if first is None:
                    first = ad
                jobs.append(Job(cluster_id, proc, ad.to_classad(), tuple(builder.warnings)))
        return jobs

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


def _load(qargs: QueueArgs, step: QueueStep, cwd: str) -> tuple[str, ...]:
    try:
        items = load_items(qargs, cwd=cwd, run_command=run_shell)
    except SubmitError as exc:
        raise exc.at(step.path, step.line) from None
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
    blocks = []
    for job in jobs:
        lines = []
        for line in job.ad.printOld().splitlines():
            name, sep, value = line.partition(" = ")
            if sep:
                lines.append(f"{name}={value}")
        lines.sort(key=str.lower)
        blocks.append("\n".join(lines))
    return "Dry-Run job(s)\n" + "\n\n".join(blocks) + "\n"


# Re-exported for callers that build ads by hand.
ForEach = ForEach
Expr = Expr
