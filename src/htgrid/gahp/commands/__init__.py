"""Each GAHP command written once: what its requests carry and what its results say, as
frozen values that both sides use, the grid manager (the client) and the GAHP servers
(`htgrid.backends`), one module per protocol family:

* `blah`: the batch GAHP (the blahp's BLAH_* commands, and htgrid's STATUS_ALL and FIND);
* `condor`: the condor GAHP (HTCondor-C's CONDOR_JOB_*);
* `ec2`: the EC2 GAHP (EC2_VM_*);
* `azure`: the Azure GAHP (AZURE_*).

A `Spec` names a command and counts the arguments after the request id (the server
checks them). A result is read from its line's fields with `of` (the client) and written
with `fields` (the server); a malformed one raises GahpProtocolError. A request of more
than one argument is a value too: `args` (the client) and `of` (the server). The words
both sides compare (error codes, "not found", transient markers) are constants here.
The wire format is the GAHP's, to the byte; each module draws its commands' lines.
These modules read ClassAds (`htgrid.classad`) where a field carries one, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from htgrid.gahp.server import Command, Handler

__all__ = ["Spec"]


@dataclass(frozen=True, slots=True)
class Spec:
    """A GAHP command: its name, and how many arguments follow the request id (at least
    that many when `variadic`)."""

    name: str
    params: int
    variadic: bool = False

    def command(
        self,
        handler: Handler,
        workers: int,
        *,
        on_error: Callable[[str], Sequence[str]] | None = None,
        parse: Callable[[tuple[str, ...]], Any] | None = None,
    ) -> Command:
        """The server's command: this one, answered by `handler` (see `Command`)."""
        return Command(
            self.name,
            self.params,
            handler,
            workers,
            variadic=self.variadic,
            on_error=on_error,
            parse=parse,
        )
