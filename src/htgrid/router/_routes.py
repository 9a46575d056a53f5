"""The job router's configuration: its routes and transforms, read from htgrid.conf.

    JOB_ROUTER_ROUTE_NAMES = Slurm Fork           the routes, in the order they are tried
    JOB_ROUTER_ROUTE_Slurm @=jrt                  a route: a transform (htgrid.submit)
      REQUIREMENTS queue == "long"                  whose jobs it takes
      GridResource = "batch slurm"                  where they go (TargetUniverse 9)
      MaxIdleJobs = 200
      SET BatchQueue "long"
    @jrt
    JOB_ROUTER_PRE_ROUTE_TRANSFORM_NAMES, JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES, and
    JOB_ROUTER_TRANSFORM_<name>: transforms applied before and after the route
    JOB_ROUTER_ENTRIES (and _FILE), JOB_ROUTER_DEFAULTS: the old ClassAd syntax, converted
    JOB_ROUTER_SOURCE_JOB_CONSTRAINT, JOB_ROUTER_NAME, JOB_ROUTER_POLLING_PERIOD,
    JOB_ROUTER_MAX_JOBS, JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE, _MAX_IDLE_JOBS_PER_ROUTE

A route's macros set its limits (MaxJobs, MaxIdleJobs, FailureRateThreshold,
JobFailureTest, EditJobInPlace, TargetUniverse, GridResource). A route that cannot be
read is left out, with the reason kept in `RouterConfig.problems` (the others still
route), as HTCondor's router does.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import HTGridError
from htgrid.pool import ConfigFile, PoolError
from htgrid.queue import SystemPolicy
from htgrid.submit import SubmitError, Transform, TransformMacros

__all__ = [
    "GRID_UNIVERSE",
    "Route",
    "RouterConfig",
    "RouterError",
    "convert_old_route",
    "convert_old_routes",
]

GRID_UNIVERSE: Final = 9


class RouterError(HTGridError):
    """The job router's configuration cannot be used."""


@dataclass(frozen=True, slots=True)
class Route:
    """One route: its transform and the limits its macros set."""

    name: str
    transform: Transform
    target_universe: int = GRID_UNIVERSE
    grid_resource: str | None = None
    max_jobs: int = 100
    max_idle_jobs: int = 50
    failure_rate_threshold: float = 0.03  # failures a second
    job_failure_test: str | None = None
    edit_job_in_place: str | None = None

    @property
    def requirements(self) -> str | None:
        return self.transform.requirements

    def matches(self, ad: ClassAd) -> bool:
        """Whether the route's REQUIREMENTS hold for the job (none: every job). The job
        is both MY and TARGET, so old routes' `target.x` reads the job too."""
        if self.requirements is None:
            return True
        return _holds(self.requirements, ad)

    def test(self, expr: str | None, ad: ClassAd) -> bool:
        """A route expression (JobFailureTest, EditJobInPlace) in the job; unset: false."""
        return expr is not None and _holds(expr, ad)


def _holds(expr: str, ad: ClassAd) -> bool:
    try:
        value = ExprTree(expr).eval(ad, ad)
    except HTGridError:
        return False
    return value is True or (type(value) in (int, float) and value != 0)


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """Everything the router reads from the configuration."""

    name: str = "jobrouter"
    routes: tuple[Route, ...] = ()
    pre: tuple[Transform, ...] = ()
    post: tuple[Transform, ...] = ()
    source_constraint: str | None = None
    polling_period: float = 10.0
    max_jobs: int = -1  # all routes together; negative: no limit
    # The policy of the jobs it manages, which the schedd leaves to it (SYSTEM_PERIODIC_*,
    # evaluated with the jobs' own every PERIODIC_EXPR_INTERVAL seconds).
    system_policy: SystemPolicy = dataclasses.field(default_factory=SystemPolicy)
    periodic_interval: float = 60.0
    knobs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    problems: tuple[str, ...] = ()

    def route(self, name: str) -> Route | None:
        for route in self.routes:
            if route.name.lower() == name.lower():
                return route
        return None

    @classmethod
    def load(cls, home: Path) -> RouterConfig:
        """The router's settings of the pool in `home` (its htgrid.conf)."""
        conf = ConfigFile.read(home)
        knobs = {key: value for key, (value, _) in conf.values.items()}
        try:
            conf.system_policy()  # a bad one is named with its line
            return cls.from_knobs(knobs, where=str(conf.path))
        except RouterError:
            raise
        except (SubmitError, PoolError) as err:
            raise RouterError(f"{conf.path}: {err}") from err

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, str], *, where: str = "htgrid.conf") -> RouterConfig:
        """The settings from knob values (upper-case names)."""
        knobs = {k.upper(): v for k, v in knobs.items()}
        try:
            policy = ConfigFile(Path(where), {k: (v, 0) for k, v in knobs.items()}).system_policy()
        except PoolError as err:
            raise RouterError(str(err)) from None
        problems: list[str] = []
        texts = _route_texts(knobs, problems)
        routes: list[Route] = []
        for name, text in texts:
            try:
                routes.append(_route(name, text, knobs))
            except SubmitError as err:
                problems.append(f"route {name} is left out: {err}")
        pre = _transforms(knobs, "JOB_ROUTER_PRE_ROUTE_TRANSFORM_NAMES", problems)
        post = _transforms(knobs, "JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES", problems)
        constraint = knobs.get("JOB_ROUTER_SOURCE_JOB_CONSTRAINT", "").strip() or None
        if constraint is not None:
            try:
                ExprTree(constraint)
            except HTGridError as err:
                raise RouterError(
                    f"{where}: JOB_ROUTER_SOURCE_JOB_CONSTRAINT is not an expression: {err}"
                ) from None
        return cls(
            name=knobs.get("JOB_ROUTER_NAME", "").strip() or "jobrouter",
            routes=tuple(routes),
            pre=pre,
            post=post,
            source_constraint=constraint,
            polling_period=_number(knobs, "JOB_ROUTER_POLLING_PERIOD", 10.0, where),
            max_jobs=int(_number(knobs, "JOB_ROUTER_MAX_JOBS", -1, where)),
            system_policy=policy,
            periodic_interval=_number(knobs, "PERIODIC_EXPR_INTERVAL", 60.0, where),
            knobs=knobs,
            problems=tuple(problems),
        )


def _number(knobs: Mapping[str, str], key: str, default: float, where: str) -> float:
    text = knobs.get(key, "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise RouterError(f"{where}: {key} must be a number, not {text!r}") from None


def _names(text: str) -> list[str]:
    return [n for n in text.replace(",", " ").split() if n]


def _route_texts(knobs: Mapping[str, str], problems: list[str]) -> list[tuple[str, str]]:
    """(name, transform text) of each enabled route, in JOB_ROUTER_ROUTE_NAMES order; old
    entries not named there follow in their own order (a new route of the same name
    replaces an old one)."""
    old = convert_old_routes(knobs, problems)
    names = _names(knobs.get("JOB_ROUTER_ROUTE_NAMES", ""))
    out: list[tuple[str, str]] = []
    for name in names:
        text = knobs.get(f"JOB_ROUTER_ROUTE_{name.upper()}")
        if text is None:
            text = next((t for n, t in old if n.lower() == name.lower()), None)
        if text is None:
            problems.append(f"route {name} is in JOB_ROUTER_ROUTE_NAMES but not defined")
            continue
        out.append((name, text))
    named = {n.lower() for n in names}
    out.extend((n, t) for n, t in old if n.lower() not in named)
    return out


def _route(name: str, text: str, knobs: Mapping[str, str]) -> Route:
    transform = Transform.parse(text, name)
    macros = TransformMacros(config=knobs)
    for key, value in transform.top_macros().items():
        macros.macros.set(key, value)
    expander = macros.expander(None)

    def param(key: str) -> str | None:
        value = expander.param(key)
        return value.strip() if value else None

    def integer(key: str, knob: str, default: int) -> int:
        text = param(key) or knobs.get(knob, "").strip()
        if not text:
            return default
        try:
            return int(float(text))
        except ValueError:
            raise SubmitError(f"{key} must be a number, not {text!r}", path=name) from None

    universe = transform.universe or integer("TargetUniverse", "", GRID_UNIVERSE)
    grid = param("GridResource")
    if grid is not None and len(grid) >= 2 and grid[0] == grid[-1] == '"':
        grid = grid[1:-1]
    threshold = param("FailureRateThreshold")
    try:
        rate = float(threshold) if threshold else 0.03
    except ValueError:
        raise SubmitError(
            f"FailureRateThreshold must be a number, not {threshold!r}", path=name
        ) from None
    for key in ("JobFailureTest", "EditJobInPlace"):
        expr = param(key)
        if expr is not None:
            try:
                ExprTree(expr)
            except HTGridError as err:
                raise SubmitError(f"{key} is not an expression: {err}", path=name) from None
    return Route(
        name=name,
        transform=transform,
        target_universe=universe,
        grid_resource=grid,
        max_jobs=integer("MaxJobs", "JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE", 100),
        max_idle_jobs=integer("MaxIdleJobs", "JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE", 50),
        failure_rate_threshold=rate,
        job_failure_test=param("JobFailureTest"),
        edit_job_in_place=param("EditJobInPlace"),
    )


def _transforms(knobs: Mapping[str, str], key: str, problems: list[str]) -> tuple[Transform, ...]:
    out = []
    for name in _names(knobs.get(key, "")):
        text = knobs.get(f"JOB_ROUTER_TRANSFORM_{name.upper()}")
        if text is None:
            problems.append(f"transform {name} is in {key} but not defined")
            continue
        try:
            out.append(Transform.parse(text, name))
        except SubmitError as err:
            problems.append(f"transform {name} is left out: {err}")
    return tuple(out)


# ---- the old syntax: JOB_ROUTER_ENTRIES -------------------------------------------------

_ENVELOPE: Final = {"name", "targetuniverse", "gridresource", "requirements"}


def convert_old_routes(knobs: Mapping[str, str], problems: list[str]) -> list[tuple[str, str]]:
    """JOB_ROUTER_ENTRIES (and JOB_ROUTER_ENTRIES_FILE), each merged over
    JOB_ROUTER_DEFAULTS, as (name, transform text), as condor_transform_ads -convert
    writes them: copy_*, then delete_*, then set_*, then eval_set_* (HTCondor's order)."""
    from htgrid.classad import parseAds

    text = knobs.get("JOB_ROUTER_ENTRIES", "")
    path = knobs.get("JOB_ROUTER_ENTRIES_FILE", "").strip()
    if path:
        try:
            text += "\n" + Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            problems.append(f"JOB_ROUTER_ENTRIES_FILE {path}: cannot read: {exc.strerror}")
    if not text.strip():
        return []
    defaults = ClassAd()
    default_text = knobs.get("JOB_ROUTER_DEFAULTS", "").strip()
    try:
        if default_text:
            defaults = ClassAd(default_text)
        entries = list(parseAds(text))
    except HTGridError as err:
        problems.append(f"JOB_ROUTER_ENTRIES cannot be read: {err}")
        return []
    out = []
    for entry in entries:
        merged = ClassAd()
        merged.update(defaults)
        merged.update(entry)
        name, converted = convert_old_route(merged)
        out.append((name, converted))
    return out


def convert_old_route(ad: ClassAd) -> tuple[str, str]:
    """One old route ad as (name, transform text)."""
    name = _string(ad, "Name") or _string(ad, "GridResource") or "route"
    lines = [f"# autoconversion of route '{name}' from old route syntax"]
    universe = ad.get("TargetUniverse")
    if isinstance(universe, int) and universe:
        lines.append(f"UNIVERSE {universe}")
    if "Requirements" in ad:
        lines.append(f"REQUIREMENTS {my_scope(str(ad.lookup('Requirements')))}")
    lines.append("")
    copies, deletes, sets, evalsets, macros = [], [], [], [], []
    for attr in sorted(ad.keys(), key=str.lower):
        low = attr.lower()
        tree = ad.lookup(attr)
        if low.startswith("copy_"):
            target = ad.get(attr)
            if isinstance(target, str):
                copies.append(f"COPY {attr[5:]} {target}")
        elif low.startswith("delete_"):
            deletes.append(f"DELETE {attr[7:]}")
        elif low.startswith("set_"):
            sets.append(f"SET {attr[4:]} {tree}")
        elif low.startswith("eval_set_"):
            evalsets.append(f"EVALSET {attr[9:]} {my_scope(str(tree))}")
        elif low == "gridresource":
            macros.append(f"{attr} = {tree}")
        elif low not in _ENVELOPE:
            value = ad.get(attr)
            macros.append(f"{attr} = {value if isinstance(value, str) else tree}")
    lines.extend(macros)
    for title, group in (("copy_*", copies), ("delete_*", deletes), ("set_*", sets)):
        if group:
            lines += ["", f"# {title} rules", *group]
    if evalsets:
        lines += ["", "# eval_set_* rules", *evalsets]
    return name, "\n".join(lines) + "\n"


def _string(ad: ClassAd, attr: str) -> str | None:
    value = ad.get(attr)
    return value if isinstance(value, str) and value else None


def my_scope(text: str) -> str:
    """`text` with each `TARGET.` written `MY.`: old routes and the source constraint
    read the job as TARGET; in a transform or a queue's query the job is MY."""
    return re.sub(r"(?i)\btarget\.", "MY.", text)
