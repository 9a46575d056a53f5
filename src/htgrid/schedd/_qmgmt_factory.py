"""Late materialization over CEDAR: the jobs of a submit with `max_materialize` or
`max_idle`, made by the schedd from the client's submit digest.

For such a submit `htcondor2.Schedd.submit` sends no procs: it sends the cluster ad
(proc 0's attributes, SetAttribute with proc -1), the item rows (SendMaterializeData:
one row a line, several variables' fields joined by the unit separator 0x1F), and the
digest (SetJobFactory: the submit statements that vary by job, `FACTORY.Iwd`, and a
Queue statement that reads its items `from` the name this schedd gave the rows). The
digest is run through htgrid's submit language; each later proc gets what it has of its
own there (its $(Process), $(Item)...), and the queue's factory holds them back as
`JobMaterializeLimit` and `JobMaterializeMaxIdle` say, as over HTTPS.

The digest is a remote user's text: it may not include files or run commands (its
Queue statement reads only the rows sent with it), as HTCondor's schedd reads its
items only from the file it spooled them to.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from htgrid.classad import ClassAd
from htgrid.errors import HTGridError
from htgrid.submit import ProcAd, SubmitDescription

__all__ = ["ITEMS_NAME", "Factory", "FactoryRefused", "materialize", "take"]

#: The name a digest's Queue statement reads its rows `from` (what SendMaterializeData
#: answers; HTCondor answers the file it spooled them to).
ITEMS_NAME: Final = "cedar-items"
_QUEUE: Final = re.compile(r"\s*queue\b(?P<args>.*)", re.IGNORECASE | re.DOTALL)
_FROM: Final = re.compile(r"\s+from\s+(?P<source>\S.*?)\s*$", re.IGNORECASE)
_MATCHING: Final = re.compile(r"\bmatching\b", re.IGNORECASE)
_INCLUDE: Final = re.compile(r"\s*include\b", re.IGNORECASE)
_BLOCK: Final = re.compile(r"[^=]*@=\s*(?P<tag>\S+)\s*$")  # key @=end ... @end


class FactoryRefused(HTGridError):
    """A late materialization digest htgrid will not run, saying why."""


@dataclass
class Factory:
    """A cluster's factory as the client sent it."""

    limit: int  # JobMaterializeLimit
    digest: str
    items: bytes | None = None


def materialize(
    cluster: int, cluster_ad: ClassAd, factory: Factory, *, owner: str, qdate: int
) -> Iterator[ClassAd]:
    """The procs `factory` makes, built as they are taken (a factory is often large):
    proc 0's an empty ad (the cluster ad is proc 0's), each later one's the attributes
    it has of its own. FactoryRefused, naming the line, for a digest that includes a
    file, runs a command or reads other items, or does not make jobs."""
    text = _submit_text(cluster, cluster_ad, factory)
    iwd = cluster_ad.get("Iwd")
    cwd = iwd if isinstance(iwd, str) and iwd.startswith("/") else "/"
    what = f"the submit digest of cluster {cluster}"
    try:
        desc = SubmitDescription.from_text(text, f"<digest of cluster {cluster}>", cwd=cwd, env={})
        procs = desc.procs(
            cluster, owner=owner, qdate=qdate, submit_dir=cwd, env={}, check_files=False
        )
    except HTGridError as exc:
        raise FactoryRefused(f"{what}: {exc}") from None
    return _own_attributes(iter(procs), what)


def _own_attributes(procs: Iterator[ProcAd], what: str) -> Iterator[ClassAd]:
    while True:
        try:
            proc = next(procs)
        except StopIteration:
            return
        except HTGridError as exc:
            raise FactoryRefused(f"{what}: {exc}") from None
        yield ClassAd() if proc.proc_id == 0 else ClassAd(dict(proc.own))


def take(procs: Iterator[ClassAd], count: int) -> list[ClassAd]:
    """The next `count` procs (fewer at the end)."""
    return list(itertools.islice(procs, count))


def _submit_text(cluster: int, cluster_ad: ClassAd, factory: Factory) -> str:
    """The digest as a submit description whose Queue statement holds its rows."""
    lines = factory.digest.splitlines()
    out: list[str] = []
    queue: str | None = None
    block: str | None = None
    for number, line in enumerate(lines, 1):
        if block is not None:  # a multi-line value: taken as it is
            out.append(line)
            if line.strip() == "@" + block:  # key @=tag ... @tag
                block = None
            continue
        where = f"the submit digest of cluster {cluster}, line {number} ({line.strip()[:80]!r})"
        if _INCLUDE.match(line):
            raise FactoryRefused(f"{where}: a digest may not include files or commands")
        if (m := _QUEUE.match(line)) is not None:
            if queue is not None:
                raise FactoryRefused(f"{where}: a digest has one Queue statement")
            queue = _queue_line(m["args"], factory, where)
            continue
        if (b := _BLOCK.match(line)) is not None:
            block = b["tag"]
        out.append(line)
    if queue is None:
        raise FactoryRefused(f"the submit digest of cluster {cluster} has no Queue statement")
    cmd = cluster_ad.get("Cmd")
    head = [f"executable = {cmd}"] if isinstance(cmd, str) and cmd else []
    return "\n".join([*head, *out, queue]) + "\n"


def _queue_line(args: str, factory: Factory, where: str) -> str:
    m = _FROM.search(args)
    if m is None:
        if "|" in args or _MATCHING.search(args):
            raise FactoryRefused(f"{where}: a digest may not run commands or list files")
        return f"queue{args}"
    if m["source"] != ITEMS_NAME:
        raise FactoryRefused(
            f"{where}: a digest's items come with it (SendMaterializeData), not from "
            f"{m['source']!r}"
        )
    if factory.items is None:
        raise FactoryRefused(f"{where}: its items were not sent (SendMaterializeData)")
    rows = factory.items.decode("utf-8", "surrogateescape").splitlines()
    if any(row.strip() == ")" for row in rows):
        raise FactoryRefused(f"{where}: an item may not be ')' alone")
    return "\n".join([f"queue{args[: m.start()]} from (", *rows, ")"])
