"""The cluster ad and each proc's own attributes (`SubmitDescription.procs`), held to
the whole build of every proc: the ads, their warnings and their errors must be what
running every step for every proc gives (`replay=False`, the algorithm `jobs` had).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from htgrid.submit import (
    SubmitConfig,
    SubmitDescription,
    SubmitError,
    dry_run_chunks,
    dry_run_text,
)
from htgrid.submit._jobad import JobBuilder


def _conformance() -> Any:
    """The conformance cases' module (the cases and the files they name)."""
    path = Path(__file__).with_name("test_conformance.py")
    spec = importlib.util.spec_from_file_location("_submit_conformance", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_CONFORMANCE = _conformance()
ALL_CASES: list[tuple[str, str]] = _CONFORMANCE.ALL_CASES
make_workspace = _CONFORMANCE.make_workspace

QDATE = 1_700_000_000
CONFIG = SubmitConfig(filesystem_domain="example.org")


def _procs(desc: SubmitDescription, workdir: Path, *, replay: bool) -> Any:
    return desc.procs(
        77,
        owner="alice",
        qdate=QDATE,
        submit_dir=str(workdir),
        config=CONFIG,
        seed=5,
        replay=replay,
    )


def _outcome(desc: SubmitDescription, workdir: Path, *, replay: bool) -> Any:
    """Everything a caller sees of the cluster: the ads, own and whole, the warnings, or
    the error (with the proc it came at)."""
    seen: list[Any] = []
    try:
        cluster = _procs(desc, workdir, replay=replay)
        cluster_ad = cluster.cluster_ad
        seen.append(
            ("cluster", cluster.count, None if cluster_ad is None else cluster_ad.printOld())
        )
        seen.extend(
            (proc.proc_id, proc.own.printOld(), cluster.whole(proc).printOld(), proc.warnings)
            for proc in cluster
        )
    except SubmitError as exc:
        seen.append(("error", str(exc)))
    return seen


def _same_both_ways(text: str, workdir: Path) -> list[Any]:
    path = workdir / "case.sub"
    path.write_text(text)
    desc = SubmitDescription.from_file(path, cwd=str(workdir), env={"HOME": "/home/alice"})
    replayed = _outcome(desc, workdir, replay=True)
    whole = _outcome(desc, workdir, replay=False)
    assert replayed == whole
    return replayed


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("procs")
    make_workspace(root)
    (root / "gaps.txt").write_text("a\n\nb\n1\n\n7\n")
    (root / "sizes").mkdir()
    for name, size in (("small", 10), ("big", 5000)):
        (root / "sizes" / name).write_text("x" * size)
    for sub in ("d0", "d1", "d2", "d3"):
        (root / sub).mkdir()
    return root


@pytest.mark.parametrize("name", [name for name, _ in ALL_CASES])
def test_every_conformance_case_three_times_over(workdir: Path, name: str) -> None:
    # Each queue statement made to queue three procs per row: the second is watched,
    # the third replayed.
    text = dict(ALL_CASES)[name]
    lines = []
    for line in text.splitlines():
        word = line.strip().split(" ", 1)
        if word[0].lower() == "queue":
            rest = word[1] if len(word) > 1 else ""
            head, sep, tail = rest.partition(" ")
            if head.isdigit():
                rest = f"{int(head) * 3}{sep}{tail}"
            elif rest and rest.split()[0].lower() not in ("in", "from", "matching"):
                rest = f"3 {rest}"
            elif not rest:
                rest = "3"
            else:
                rest = f"3 Item {rest}" if rest.split()[0].lower() in ("in", "from") else rest
            line = f"queue {rest}"
        lines.append(line)
    _same_both_ways("\n".join(lines) + "\n", workdir)


VARYING = {
    "arguments": "executable = basic.cmd\narguments = $(Item) step $(Step) of $(Process)\n"
    "output = out.$(Process)\nerror = err.$(ItemIndex)\nqueue 3 Item in (a, b, c)\n",
    "initialdir": "executable = /bin/true\ninitialdir = d$(Process)\ninput = ../x.dat\n"
    'transfer_input_files = ../in1.txt\noutput = o.txt\nlog = l.log\n+Where = "$Ff(x.dat)"\n'
    "queue 4\n",
    "executable": "executable = $(Item)\nqueue Item in (basic.cmd, /bin/true, basic.cmd)\n",
    "input sizes": "executable = /bin/true\nshould_transfer_files = YES\n"
    "transfer_input_files = sizes/$(Item)\nqueue Item in (small, big, none, small)\n",
    "requests": "executable = /bin/true\nrequest_memory = $(M)\nrequest_cpus = $(C)\n"
    "request_disk = $(C)G\nqueue M, C from (\n  100, 1\n  2000, 4\n  3, 1\n  1G, 2\n)\n",
    "gpus appear later": "executable = /bin/true\nrequest_gpus = $(Item)\n"
    "gpus_minimum_capability = 7\nqueue Item from gaps.txt\n",
    "custom resources": "executable = /bin/true\nrequest_foo = $(Item)\nqueue Item from gaps.txt\n",
    "accounting": "executable = /bin/true\naccounting_group = $(Item)\nqueue Item from gaps.txt\n",
    "forced attributes": 'executable = /bin/true\n+Sample = "$(Item)"\nMY.Index = $(Process)\n'
    "+Fixed = 12\n+Maybe = $(Item)\nqueue Item from gaps.txt\n",
    "random": "executable = /bin/true\narguments = $RANDOM_INTEGER(1, 1000)\n"
    '+Pick = "$RANDOM_CHOICE(a,b,c,d)"\nqueue 6\n',
    "functions": "executable = /bin/true\narguments = $INT(Process,%03d) $Fn(Item) $Fx(Item) "
    "$CHOICE(Process, p, q, r, s, t) $(Nope:$(Item)) $SUBSTR(Item, 1, 2)\n"
    "queue Item in (a/b.c, d.e, f)\n",
    "environment": 'executable = /bin/true\nenvironment = "ITEM=$(Item) N=$(Process)"\n'
    "queue Item in (x, y, z)\n",
    "deferral": "executable = /bin/true\ndeferral_time = $(Item)\nqueue Item from gaps.txt\n",
    "hold by item": "executable = /bin/true\nhold = $(Item)\nqueue Item in (false, true, false)\n",
    "slices and rows": "executable = /bin/true\narguments = $(Row) $(Step) $(Item)\n"
    "queue 2 Item in [1:5:2] (a, b, c, d, e, f)\n",
    "two statements": "executable = /bin/true\narguments = $(Item)\nqueue 2 Item in (a, b)\n"
    "output = o.$(Process)\narguments = fixed\nqueue 3\n"
    "request_memory = $(Process)\nqueue 2\n",
    "matching": "executable = /bin/true\ntransfer_input_files = $(Item)\n"
    "queue Item matching files *.dat\n",
    "vm": "universe = vm\nvm_type = kvm\nvm_memory = $(Item)\nvm_disk = dummy.qcow2:vda:w\n"
    "executable = vmjob\nqueue Item in (128, 256, 512)\n",
    "grid": "universe = grid\ngrid_resource = batch $(Item)\nexecutable = /bin/true\n"
    "queue Item in (slurm, pbs, sge)\n",
    "docker": "universe = docker\ndocker_image = $(Item)\nexecutable = /bin/true\n"
    "queue Item in (busybox, alpine:3, debian)\n",
    "universe varies": "universe = $(Item)\nexecutable = /bin/true\n"
    "queue Item in (vanilla, local, scheduler, vanilla)\n",
    "warnings": "executable = /bin/true\njob_lease_duration = $(Item)\n"
    "queue Item in (10, 3000, 5)\n",
    "concurrency": "executable = /bin/true\nconcurrency_limits = $(Item)\n"
    "queue Item from gaps.txt\n",
    "notification by item": "executable = /bin/true\nnotification = $(Item)\n"
    "queue Item in (never, error, complete)\n",
    "retries": "executable = /bin/true\nmax_retries = $(Item)\nqueue Item in (1, 2, 3)\n",
    "proc ids everywhere": "executable = /bin/true\nlog = log.$(ClusterId).$(ProcId)\n"
    "batch_name = b$(Process)\npriority = $(Process)\nqueue 5\n",
}


@pytest.mark.parametrize("name", sorted(VARYING))
def test_procs_that_vary(workdir: Path, name: str) -> None:
    seen = _same_both_ways(VARYING[name], workdir)
    assert seen[-1][0] != "error" or name in ("universe varies",), seen[-1]


def test_a_bad_value_midway_names_its_proc(workdir: Path) -> None:
    text = "executable = /bin/true\nhold = $(Item)\nqueue Item in (true, false, maybe, true)\n"
    seen = _same_both_ways(text, workdir)
    assert seen[-1][0] == "error" and "maybe" in seen[-1][1]
    assert [entry[0] for entry in seen[1:-1]] == [0, 1]


def test_nothing_varies_nothing_is_own(workdir: Path) -> None:
    desc = SubmitDescription.from_text(
        "executable = /bin/true\nhold = true\nqueue 1000\n", cwd=str(workdir)
    )
    cluster = desc.procs(3, owner="alice", qdate=QDATE)
    assert cluster.count == 1000
    assert cluster.cluster_ad["JobStatus"] == 5 and "ProcId" not in cluster.cluster_ad
    procs = list(cluster)
    assert [p.proc_id for p in procs] == list(range(1000))
    assert all(len(p.own) == 0 for p in procs)


def test_only_what_varies_is_own(workdir: Path) -> None:
    text = "executable = /bin/echo\narguments = $(Item) $(Step)\nqueue 2 Item in (a, b)\n"
    desc = SubmitDescription.from_text(text, cwd=str(workdir))
    owns = [dict(p.own) for p in desc.procs(3, owner="alice", qdate=QDATE)]
    assert owns == [{}, {"Args": "a 1"}, {"Args": "b 0"}, {"Args": "b 1"}]


def test_later_procs_run_only_the_steps_that_vary(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[int] = []
    whole = JobBuilder.build

    def counted(self: JobBuilder) -> Any:
        built.append(self.proc)
        return whole(self)

    monkeypatch.setattr(JobBuilder, "build", counted)
    text = (
        "executable = /bin/echo\narguments = $(Item) $(Process)\noutput = o.$(Item)\n"
        "queue 10 Item in (a, b, c)\n"
    )
    desc = SubmitDescription.from_text(text, cwd=str(workdir))
    procs = list(desc.procs(3, owner="alice", qdate=QDATE))
    assert len(procs) == 30
    assert built == [0]  # proc 0 whole, proc 1 watched, the rest replayed
    assert dict(procs[29].own) == {"Args": "c 29", "Out": "o.c"}


def test_a_cluster_is_gone_through_once(workdir: Path) -> None:
    desc = SubmitDescription.from_text("executable = /bin/true\nqueue 2\n", cwd=str(workdir))
    cluster = desc.procs(3, owner="alice", qdate=QDATE)
    assert len(list(cluster)) == 2
    with pytest.raises(RuntimeError):
        list(cluster)


def test_no_procs(workdir: Path) -> None:
    desc = SubmitDescription.from_text("executable = /bin/true\nqueue 0\n", cwd=str(workdir))
    cluster = desc.procs(3, owner="alice", qdate=QDATE)
    assert (cluster.count, cluster.cluster_ad, list(cluster)) == (0, None, [])
    assert desc.jobs(3, owner="alice", qdate=QDATE) == []


@pytest.mark.parametrize("name", sorted(set(VARYING) - {"universe varies"}))  # that one fails
def test_the_streamed_dry_run_prints_what_the_whole_one_does(workdir: Path, name: str) -> None:
    desc = SubmitDescription.from_text(VARYING[name], cwd=str(workdir))
    args: dict[str, Any] = {"owner": "alice", "qdate": QDATE, "config": CONFIG, "seed": 5}
    whole = dry_run_text(desc.jobs(77, submit_dir=str(workdir), **args))
    seen: list[int] = []
    chunks = dry_run_chunks(
        desc.procs(77, submit_dir=str(workdir), **args), lambda p: seen.append(p.proc_id)
    )
    assert "".join(chunks) == whole
    assert seen == list(range(len(seen))) and seen


def test_an_item_file_is_read_as_its_procs_are_made_not_held(tmp_path: Path) -> None:
    # A `queue ... from` file of 200,000 lines (9 MB): holding its lines took ~20 MB
    # (a million-line file, a hundred); counting them and reading them as procs are made
    # takes the memory of a line.
    import tracemalloc

    (tmp_path / "items.txt").write_text("".join(f"item-{n:040d}\n" for n in range(200_000)))
    text = "executable = /bin/true\narguments = $(Item) $(Process)\nqueue 2 Item from items.txt\n"
    desc = SubmitDescription.from_text(text)
    tracemalloc.start()
    try:
        cluster = _procs(desc, tmp_path, replay=True)
        procs = iter(cluster)
        first = [next(procs) for _ in range(3)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak
    assert cluster.count == 400_000
    arguments = [cluster.whole(p)["Args"] for p in first]
    assert arguments == [f"item-{0:040d} 0", f"item-{0:040d} 1", f"item-{1:040d} 2"]


def test_an_item_file_that_changes_while_it_is_read_stops_the_cluster(tmp_path: Path) -> None:
    items = tmp_path / "items.txt"
    items.write_text("a\r\nb\rc\n\n# kept\n")  # every line is an item, blank or not
    desc = SubmitDescription.from_text(
        "executable = /bin/true\narguments = <$(Item)>\nqueue Item from items.txt\n"
    )
    cluster = _procs(desc, tmp_path, replay=True)
    assert cluster.count == 5
    assert [cluster.whole(p)["Args"] for p in cluster] == [
        "<a>",
        "<b>",
        "<c>",
        "<>",
        "<# kept>",
    ]
    items.write_text("x\n" * 50_000)
    cluster = _procs(desc, tmp_path, replay=True)
    items.write_text("y\n" * 60_000)  # in place, past what the first read took in
    with pytest.raises(SubmitError, match="changed while it was read"):
        list(cluster)
    items.write_text("a\nb\x00\n")
    with pytest.raises(SubmitError, match=r"item 2 .* NUL") as caught:
        _procs(desc, tmp_path, replay=True)
    assert caught.value.line == 3
