"""What travels in the API's JSON bodies: job ads, job ids and job selections.

Job ads travel in HTCondor's JSON form of a ClassAd (what `condor_q -json` prints):
literals as JSON values, expressions as `"\\/Expr(...)\\/"` strings, so nothing is
evaluated on the way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from htgrid.classad import ClassAd, ParserType, parseOne, quote
from htgrid.errors import ClassAdSyntaxError, HTGridError
from htgrid.net._errors import BadRequest
from htgrid.queue import ID_MAX, Identity, JobId

if TYPE_CHECKING:
    from htgrid.queue import JobSpec

__all__ = [
    "Jobs",
    "ad_from_json",
    "ads_json",
    "background",
    "job_ids_from_json",
    "loads",
    "loads_request",
]


# HTCondor's JSON marks an expression by the escaped slashes of "\/Expr(...)\/", which
# a JSON decoder turns into plain slashes: so the marker is swapped for a NUL (never in
# a ClassAd string) before decoding, and back before the ClassAd reader sees it.
_RAW: Final = '"\\/Expr('
_HELD: Final = '"\\u0000Expr('
_INT64: Final = (-(2**63), 2**63 - 1)


def loads(text: str | bytes) -> Any:
    """Decode JSON holding job ads, keeping their expressions recognisable."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text.replace(_RAW, _HELD))


def loads_request(body: bytes) -> Any:
    """`loads` of a request body; BadRequest when it is not JSON (or nested past what
    the decoder takes)."""
    try:
        return loads(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("the request body is not JSON htgrid reads: nested too deeply") from None


def ads_json(ads: Sequence[ClassAd]) -> str:
    """A JSON array of ads in HTCondor's JSON form (text: the markers must stay raw)."""
    return "[" + ",\n".join(ad.printJson() for ad in ads) + "]"


def ad_from_json(obj: object, what: str = "a job ad") -> ClassAd:
    """The ClassAd of an object decoded by `loads`; BadRequest, saying which attribute of
    `what` is wrong, when it is not one (or holds what a ClassAd cannot: a NUL in a
    string, an integer past 64 bits)."""
    if not isinstance(obj, dict):
        raise BadRequest(f"{what} must be a JSON object, not {type(obj).__name__}")
    if not obj:
        return ClassAd()
    plain = True
    for name, value in obj.items():
        if "\0" in name:
            raise BadRequest(f"{what}: the attribute name {name!r} holds a NUL character")
        if not _plain(value):
            shown = name if name.isprintable() else repr(name)
            _check_value(value, f"{what}: attribute {shown}")
            plain = False
    if plain:
        # Literals only (most ads a query returns): the same ad, without the parser.
        return ClassAd(obj)
    text = json.dumps(obj, ensure_ascii=False).replace(_HELD, _RAW)
    try:
        return parseOne(text, ParserType.JSON)
    except ClassAdSyntaxError as exc:
        raise BadRequest(f"{what}: not a ClassAd in JSON form: {exc.reason}") from exc
    except HTGridError as exc:
        raise BadRequest(f"{what}: not a ClassAd in JSON form: {exc}") from exc


def _plain(value: object) -> bool:
    """Whether a decoded JSON value is a literal ClassAd(dict) reads as the parser does."""
    if type(value) is str:
        return "\0" not in value  # else an expression's marker (see loads)
    if type(value) is int:
        return _INT64[0] <= value <= _INT64[1]
    return type(value) is float or type(value) is bool or value is None


#: Deeper than any ClassAd the parser reads (its budget of 500 gives lists 165 levels);
#: the JSON is not walked further.
_MAX_NESTING: Final = 200


def _check_value(value: object, where: str) -> None:
    """BadRequest when a decoded value holds what a ClassAd cannot (walked without
    recursion: a body may nest as deep as the JSON decoder went)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            text: str = item  # type: ignore[assignment]
            body = text[1:] if text.startswith("\0Expr(") else text  # an expression's marker
            if "\0" in body:
                raise BadRequest(
                    f"{where} holds a NUL character, which a ClassAd string cannot hold"
                )
        elif kind is int and not _INT64[0] <= item <= _INT64[1]:  # type: ignore[operator]
            raise BadRequest(f"{where} is {item}, past the 64 bits of a ClassAd integer")
        elif kind is list or kind is dict:
            if depth >= _MAX_NESTING:
                raise BadRequest(f"{where} is nested too deeply")
            if kind is dict:
                names = item.keys()  # type: ignore[attr-defined]
                if any("\0" in n for n in names):
                    raise BadRequest(f"{where}: a nested attribute name holds a NUL character")
                members = list(item.values())  # type: ignore[attr-defined]
            else:
                members = item  # type: ignore[assignment]
            stack.extend((member, depth + 1) for member in members)


def job_ids_from_json(obj: object) -> list[JobId]:
    """A JSON list of "cluster.proc" strings as job ids."""
    if not isinstance(obj, list):
        raise BadRequest("expected a list of job ids")
    try:
        return [JobId.parse(str(item)) for item in obj]
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class Jobs:
    """Which jobs an action or an edit is for: exactly one of the four ways.

    `Jobs.of(["12.0", "12.3"])`, `Jobs.in_cluster(12)`, `Jobs.matching("JobStatus == 5")`
    or `Jobs.mine()` (all the caller's jobs, as `condor_rm -all` means it).
    """

    ids: tuple[JobId, ...] = ()
    cluster: int | None = None
    constraint: str | None = None
    mine_only: bool = False

    @classmethod
    def of(cls, ids: list[JobId | str] | tuple[JobId | str, ...]) -> Jobs:
        return cls(ids=tuple(i if isinstance(i, JobId) else JobId.parse(i) for i in ids))

    @classmethod
    def in_cluster(cls, cluster: int) -> Jobs:
        return cls(cluster=cluster)

    @classmethod
    def matching(cls, constraint: str) -> Jobs:
        return cls(constraint=constraint)

    @classmethod
    def mine(cls) -> Jobs:
        return cls(mine_only=True)

    def to_json(self) -> dict[str, Any]:
        if self.ids:
            return {"ids": [str(i) for i in self.ids]}
        if self.cluster is not None:
            return {"cluster": self.cluster}
        if self.constraint is not None:
            return {"constraint": self.constraint}
        return {"all": True}

    @classmethod
    def from_json(cls, obj: object) -> Jobs:
        """The selection in a request body (BadRequest unless exactly one way is given)."""
        if not isinstance(obj, dict) or len(obj) != 1:
            raise BadRequest(
                'select jobs with exactly one of {"ids": [...]}, {"cluster": N}, '
                '{"constraint": "..."} or {"all": true}'
            )
        ((key, value),) = obj.items()
        if key == "ids":
            ids = job_ids_from_json(value)
            if not ids:
                raise BadRequest("the list of job ids is empty")
            return cls(ids=tuple(ids))
        if key == "cluster" and type(value) is int and 0 < value <= ID_MAX:
            return cls(cluster=value)
        if key == "constraint" and isinstance(value, str):
            return cls(constraint=value)
        if key == "all" and value is True:
            return cls(mine_only=True)
        raise BadRequest(f"cannot select jobs with {json.dumps(obj)}")

    def spec(self, identity: Identity) -> JobSpec:
        """The selection as the queue takes it, for `identity`."""
        if self.ids:
            return list(self.ids)
        if self.cluster is not None:
            return self.cluster
        if self.constraint is not None:
            # Parenthesised: the queue reads a bare "12" or "12.0" as job ids.
            return f"({self.constraint})"
        return f"Owner == {quote(identity.name)}"


#: The urgency (RFC 9218's Priority header, `u=0`..`u=7`, 3 by default) of a request the
#: daemon may put behind its own work: a grid manager letting go of finished jobs.
BACKGROUND_URGENCY: Final = 7


def background(priority: str | None) -> bool:
    """Whether a request's `Priority` header (RFC 9218) asks for the lowest urgency. A
    header that does not parse is ignored, as the RFC has it: the default urgency."""
    urgency = 3
    for member in (priority or "").split(","):
        name, _, value = member.partition("=")
        value = value.split(";", 1)[0].strip()
        if name.strip() == "u" and value.isdigit() and int(value) <= BACKGROUND_URGENCY:
            urgency = int(value)
    return urgency == BACKGROUND_URGENCY
