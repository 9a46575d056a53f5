"""The policy knobs of the execute node (see `_policy`), as htgrid.conf sets them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from htgrid.classad import ClassAd, ExprTree
from htgrid.errors import ClassAdSyntaxError
from htgrid.pool import ConfigFile, PoolError

__all__ = ["POLICY_KNOBS", "StartdPolicy", "expression_knob", "publish_policy"]

#: The knob of each expression of `StartdPolicy`.
POLICY_KNOBS: Final = {
    "want_suspend": "WANT_SUSPEND",
    "suspend": "SUSPEND",
    "continue_": "CONTINUE",
    "preempt": "PREEMPT",
    "want_vacate": "WANT_VACATE",
    "kill": "KILL",
    "max_job_retirement_time": "MAXJOBRETIREMENTTIME",
}


@dataclass(frozen=True, slots=True)
class StartdPolicy:
    """The policy expressions (ClassAd expression text) and how often they are evaluated."""

    want_suspend: str = "false"
    suspend: str = "false"
    continue_: str = "true"
    preempt: str = "false"
    want_vacate: str = "true"
    kill: str = "false"
    max_job_retirement_time: str = "0"
    polling_interval: float = 5.0

    @classmethod
    def load(cls, conf: ConfigFile) -> StartdPolicy:
        """The policy of htgrid.conf (PoolError naming the line of a bad expression)."""
        texts: dict[str, str] = {}
        for name, knob in POLICY_KNOBS.items():
            key = f"{knob}_VANILLA" if conf.text(f"{knob}_VANILLA", "") else knob
            texts[name] = expression_knob(conf, key)
        return cls(**texts, polling_interval=conf.number("POLLING_INTERVAL"))

    def changed(self, other: StartdPolicy) -> list[str]:
        """The knobs whose value differs in `other`."""
        knobs = {**POLICY_KNOBS, "polling_interval": "POLLING_INTERVAL"}
        return [
            knobs[f.name] for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)
        ]


def expression_knob(conf: ConfigFile, key: str, default: str | None = None) -> str:
    """A knob's ClassAd expression text (PoolError naming the line when it is not one)."""
    text = conf.text(key, default)
    try:
        ExprTree(text)
    except ClassAdSyntaxError as exc:
        line = conf.values[key][1]
        raise PoolError(
            f"{conf.path}:{line}: {key} is not a ClassAd expression: {exc.reason}"
        ) from None
    return text


#: The slot ad's attribute of each expression, as HTCondor's startd publishes them.
_PUBLISHED: Final = {**POLICY_KNOBS, "max_job_retirement_time": "MaxJobRetirementTime"}


def publish_policy(ad: ClassAd, policy: StartdPolicy) -> None:
    """Put the policy's expressions in a slot ad (SUSPEND, PREEMPT... and
    MaxJobRetirementTime), as `condor_status -l` shows HTCondor's."""
    for name, attr in _PUBLISHED.items():
        ad[attr] = ExprTree(getattr(policy, name))
