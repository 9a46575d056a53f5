"""The annexes page: each annex's instances, slots, lease countdown and spend, from
the Annex ads the pool keeps in its collector (`htgrid status -annex`)."""

from __future__ import annotations

from collections.abc import Sequence

from htgrid.classad import ClassAd
from htgrid.queue import Identity
from htgrid.web._html import Html, el, join
from htgrid.web._pages import ago, when

__all__ = ["annex_page"]

_INSTANCES = ("Requested", "Pending", "Booting", "Joined", "Terminated")


def _int(ad: ClassAd, attr: str) -> int:
    value = ad.get(attr)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _lease(ad: ClassAd, now: float) -> Html:
    end = ad.get("LeaseExpiration")
    if isinstance(end, bool) or not isinstance(end, int | float):
        return el("span", {"class": "badge"}, "no lease recorded")
    left = end - now
    if left <= 0:
        return el("span", {"class": "badge st-held"}, f"ended {ago(-left)} ago")
    return el(
        "span",
        {"class": "badge st-running", "data-lease-end": int(end)},
        f"{ago(left)} left (until {when(end)})",
    )


def _spend(ad: ClassAd) -> str:
    spend = ad.get("Spend")
    if isinstance(spend, bool) or not isinstance(spend, int | float):
        return ""
    known = ad.get("SpendPricesKnown") is not False
    return f"~${spend:.2f}" + ("" if known else " (some instance types not priced)")


def annex_page(ads: Sequence[ClassAd], problem: str | None, identity: Identity, now: float) -> Html:
    """The caller's annexes (everyone's for an administrator), soonest lease end first."""
    if problem:
        return el("p", {"class": "problem"}, problem)
    mine = [ad for ad in ads if identity.admin or ad.get("Owner") == identity.name]
    if not mine:
        return el(
            "p",
            {"class": "empty"},
            "No annexes (htgrid annex create) have reported to the collector"
            + ("." if identity.admin else " for you."),
        )
    rows = []
    for ad in sorted(mine, key=lambda a: (_int(a, "LeaseExpiration"), str(a.get("Name")))):
        name = str(ad.get("AnnexName") or ad.get("Name") or "")
        where = " ".join(str(ad.get(k)) for k in ("Cloud", "Region") if ad.get(k))
        rows.append(
            el(
                "tr",
                {"data-annex": name},
                el("td", None, el("code", None, name)),
                el("td", None, str(ad.get("Owner") or "")),
                el("td", None, where),
                el("td", {"class": "lease"}, _lease(ad, now)),
                [el("td", {"class": "num"}, _int(ad, k)) for k in _INSTANCES],
                el("td", {"class": "num"}, f"{_int(ad, 'BusySlots')} / {_int(ad, 'IdleSlots')}"),
                el("td", None, _spend(ad)),
            )
        )
    head = el(
        "tr",
        None,
        [
            el("th", None, h)
            for h in ("Annex", "Owner", "Cloud", "Lease", *_INSTANCES, "Slots busy / idle", "Spend")
        ],
    )
    note = el(
        "p",
        {"class": "hint"},
        "Instances as the cloud reports them; the lease ends every instance on the cloud's "
        "side even if this pool is gone. Spend is an estimate from on-demand prices.",
    )
    table = el("table", {"class": "annexes"}, el("thead", None, head), el("tbody", None, rows))
    return join([table, note])
