"""The pages' HTML: the frame (`frame`) and each page's live part, which the browser
fetches again every few seconds (`static/web.js`) without reloading the page.

Every value from an ad, a file or a request goes through `_html.el`/`esc`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from htgrid.classad import ClassAd
from htgrid.eventlog import LoggedEvent
from htgrid.grid.explain import explain_grid_job
from htgrid.queue import Identity
from htgrid.router import RouterConfig, RouteVerdict
from htgrid.web._data import OutputFile, ResourceSummary, site_of, status_label
from htgrid.web._html import Html, el, join, link

__all__ = [
    "NAV",
    "WINDOWS",
    "ago",
    "frame",
    "job_page",
    "login_page",
    "message_page",
    "pool_page",
    "queue_table",
    "resources_table",
    "routes_page",
    "state_badges",
    "when",
]

#: The pages of the menu: path, name.
NAV: Sequence[tuple[str, str]] = (
    ("/web/", "Queue"),
    ("/web/pool", "Pool"),
    ("/web/grid", "Grid resources"),
    ("/web/routes", "CE routes"),
    ("/web/annexes", "Annexes"),
)
WINDOWS: Mapping[str, int] = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}


def when(t: object, now: float | None = None) -> str:
    """A time as the user's clock says it, with how long ago."""
    if isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
        return ""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    if now is None:
        return stamp
    return f"{stamp} ({ago(now - t)} ago)"


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def frame(
    title: str,
    identity: Identity,
    path: str,
    content: Html,
    *,
    live: bool = True,
    tools: Html | None = None,
    logout: bool = False,
) -> Html:
    """The whole page: menu, who is looking, the page's tools and its live part."""
    nav = el(
        "nav",
        None,
        [
            el("a", {"href": href, "aria-current": "page" if href == path else None}, name)
            for href, name in NAV
        ],
    )
    who = [el("span", {"class": "who", "data-user": identity.name}, identity.name)]
    if identity.admin:
        who.append(el("span", {"class": "badge admin"}, "administrator"))
    if logout:
        who.append(
            el(
                "form",
                {"method": "post", "action": "/web/logout", "class": "inline"},
                el("button", {"type": "submit"}, "Sign out"),
            )
        )
    header = el("header", None, el("strong", None, "htgrid"), nav, el("div", {"class": "me"}, who))
    main = el(
        "main",
        {"id": "live", "data-live": "1" if live else None, "aria-live": "polite"},
        content,
    )
    body = el("body", None, header, el("h1", None, title), tools, main)
    head = el(
        "head",
        None,
        Html('<meta charset="utf-8">'),
        Html('<meta name="viewport" content="width=device-width, initial-scale=1">'),
        el("title", None, f"{title} · htgrid"),
        Html('<link rel="stylesheet" href="/web/static/web.css">'),
        Html('<script src="/web/static/web.js" defer></script>'),
    )
    return Html("<!DOCTYPE html>\n" + el("html", {"lang": "en"}, head, body))


def message_page(title: str, text: str, status_hint: str = "") -> Html:
    """A page outside the frame (sign-in problems, errors), with nothing of any job."""
    head = el(
        "head",
        None,
        Html('<meta charset="utf-8">'),
        el("title", None, f"{title} · htgrid"),
        Html('<link rel="stylesheet" href="/web/static/web.css">'),
    )
    body = el(
        "body",
        {"class": "narrow"},
        el("h1", None, title),
        el("p", None, text),
        el("p", {"class": "hint"}, status_hint) if status_hint else None,
    )
    return Html("<!DOCTYPE html>\n" + el("html", {"lang": "en"}, head, body))


def login_page(problem: str | None, realm: str) -> Html:
    """The form taking a token of the pool (`htgrid token create`), posted to /web/login."""
    form = el(
        "form",
        {"method": "post", "action": "/web/login", "class": "login"},
        el("label", {"for": "token"}, f"A token of the pool {realm}"),
        el(
            "textarea",
            {
                "id": "token",
                "name": "token",
                "rows": 5,
                "required": True,
                "autocomplete": "off",
                "spellcheck": "false",
            },
        ),
        el("button", {"type": "submit", "id": "signin"}, "Sign in"),
    )
    hint = (
        "Make one with `htgrid token create -identity you@" + realm + "` (an administrator "
        "makes it for you), or run `htgrid web` on the pool's host to sign in as your "
        "local user without one."
    )
    head = el(
        "head",
        None,
        Html('<meta charset="utf-8">'),
        el("title", None, "Sign in · htgrid"),
        Html('<link rel="stylesheet" href="/web/static/web.css">'),
    )
    body = el(
        "body",
        {"class": "narrow"},
        el("h1", None, "Sign in to htgrid"),
        el("p", {"class": "problem", "role": "alert"}, problem) if problem else None,
        form,
        el("p", {"class": "hint"}, hint),
    )
    return Html("<!DOCTYPE html>\n" + el("html", {"lang": "en"}, head, body))


def state_badges(counts: Mapping[str, int]) -> Html:
    """Jobs counted by state, as coloured badges."""
    if not counts:
        return el("p", {"class": "empty"}, "No jobs.")
    return el(
        "p",
        {"class": "badges"},
        [
            el(
                "span",
                {
                    "class": f"badge st-{name.split()[0].lower()}",
                    "data-state": name,
                    "data-count": n,
                },
                f"{name}: {n}",
            )
            for name, n in counts.items()
        ],
    )


def _command(ad: ClassAd) -> str:
    cmd = ad.get("Cmd")
    args = ad.get("Arguments", ad.get("Args", ""))
    text = f"{cmd if isinstance(cmd, str) else ''} {args if isinstance(args, str) else ''}"
    return text.strip()


def _job_id(ad: ClassAd) -> str:
    return f"{ad.get('ClusterId')}.{ad.get('ProcId')}"


def queue_table(ads: Sequence[ClassAd], now: float, *, key: str, more: bool) -> Html:
    """The jobs of `ads`, one row each, linking to each job's page."""
    if not ads:
        return el("p", {"class": "empty", "data-table": key}, "No jobs match.")
    rows = []
    for ad in ads:
        job = _job_id(ad)
        label = status_label(ad.get("JobStatus"))
        hold = ad.get("HoldReason") if ad.get("JobStatus") == 5 else None
        rows.append(
            el(
                "tr",
                {"data-job": job, "data-status": label},
                el("td", None, link(f"/web/jobs/{job}", job)),
                el("td", None, ad.get("Owner")),
                el(
                    "td", None, el("span", {"class": f"badge st-{label.split()[0].lower()}"}, label)
                ),
                el("td", None, when(ad.get("QDate"))),
                el("td", None, site_of(ad)),
                el("td", {"class": "cmd"}, _command(ad)),
                el("td", {"class": "why"}, hold if isinstance(hold, str) else ""),
            )
        )
    head = el(
        "tr",
        None,
        [
            el("th", None, h)
            for h in ("ID", "Owner", "Status", "Submitted", "Site", "Command", "Hold reason")
        ],
    )
    note = el("p", {"class": "hint"}, f"Only the first {len(ads)} are shown.") if more else None
    return join(
        [
            el(
                "table",
                {"class": "jobs", "data-table": key},
                el("thead", None, head),
                el("tbody", None, rows),
            ),
            note,
        ]
    )


def _events(events: Sequence[LoggedEvent], problem: str | None) -> Html:
    if problem:
        return el("p", {"class": "empty"}, problem)
    if not events:
        return el("p", {"class": "empty"}, "No events logged yet.")
    items = [
        el(
            "li",
            {"data-event": f"{e.number:03d}"},
            el("time", None, e.when),
            el("span", {"class": "code"}, f"{e.number:03d}"),
            el("span", None, e.title),
            el("pre", None, "\n".join(line.strip() for line in e.body)) if e.body else None,
        )
        for e in events
    ]
    return el("ol", {"class": "timeline"}, items)


def _outputs(files: Sequence[OutputFile]) -> Html:
    if not files:
        return el("p", {"class": "empty"}, "The job names no output or error file.")
    parts = []
    for f in files:
        size = "not there (yet)" if f.size is None else f"{f.size} bytes"
        cut = " — its last 64 KiB" if f.cut else ""
        parts.append(
            el(
                "section",
                {"class": "output", "data-output": f.label},
                el("h3", None, f"{f.label}: ", el("code", None, f.path), f" ({size}{cut})"),
                el("pre", None, f.text) if f.size is not None else None,
            )
        )
    return join(parts)


def job_page(
    ad: ClassAd,
    queued: bool,
    events: Sequence[LoggedEvent],
    events_problem: str | None,
    outputs: Sequence[OutputFile],
    now: float,
) -> Html:
    """One job: its state and why, its event timeline, its output, its whole ad."""
    label = status_label(ad.get("JobStatus"))
    facts = [
        (
            "Status",
            el(
                "span",
                {
                    "class": f"badge st-{label.split()[0].lower()}",
                    "id": "job-status",
                    "data-status": label,
                },
                label,
            ),
        ),
        ("Owner", ad.get("Owner")),
        ("Submitted", when(ad.get("QDate"), now)),
        ("Where", site_of(ad)),
        ("Command", _command(ad)),
        ("In the queue", "yes" if queued else "no: from the history"),
    ]
    if ad.get("JobStatus") == 5:
        facts.append(("Hold reason", f"{ad.get('HoldReason')} (code {ad.get('HoldReasonCode')})"))
    table = el(
        "dl", {"class": "facts"}, [join([el("dt", None, k), el("dd", None, v)]) for k, v in facts]
    )
    grid = None
    if ad.get("JobUniverse") == 9:
        grid = join(
            [
                el("h2", None, "Grid job"),
                el("ul", None, [el("li", None, line) for line in explain_grid_job(ad)]),
            ]
        )
    attrs = sorted(ad.keys(), key=str.lower)
    ad_rows = [
        el("tr", None, el("th", None, name), el("td", None, el("code", None, str(ad.lookup(name)))))
        for name in attrs
    ]
    return join(
        [
            table,
            grid,
            el("h2", None, "Events"),
            _events(events, events_problem),
            el("h2", None, "Output"),
            _outputs(outputs),
            el("h2", None, "Job ad"),
            el("table", {"class": "ad"}, el("tbody", None, ad_rows)),
        ]
    )


def _slot_state(ad: ClassAd) -> str:
    state = ad.get("State")
    activity = ad.get("Activity")
    return f"{state}/{activity}" if isinstance(activity, str) else str(state)


def pool_page(
    slots: Sequence[ClassAd], problem: str | None
) -> tuple[Html, list[tuple[str, float]]]:
    """The slots, by state, with the pool's use of its CPUs; and the counts by state."""
    if problem:
        return el("p", {"class": "problem"}, problem), []
    by_state = Counter(_slot_state(ad) for ad in slots)
    cpus = sum(_int(ad.get("Cpus")) for ad in slots)
    busy = sum(_int(ad.get("Cpus")) for ad in slots if ad.get("State") == "Claimed")
    share = 0.0 if not cpus else 100.0 * busy / cpus
    meter = el(
        "p",
        {"class": "use", "data-busy": busy, "data-cpus": cpus},
        f"{busy} of {cpus} CPUs claimed ({share:.0f}%) in {len(slots)} slots ",
        el("meter", {"min": 0, "max": max(cpus, 1), "value": busy}, f"{share:.0f}%"),
    )
    rows = [
        el(
            "tr",
            {"data-slot": ad.get("Name"), "data-state": _slot_state(ad)},
            el("td", None, ad.get("Name")),
            el("td", None, _slot_state(ad)),
            el("td", {"class": "num"}, ad.get("Cpus")),
            el("td", {"class": "num"}, ad.get("Memory")),
            el("td", None, ad.get("RemoteOwner") or ad.get("RemoteUser") or ""),
            el("td", None, ad.get("JobId") or ""),
        )
        for ad in sorted(slots, key=lambda a: str(a.get("Name")))
    ]
    head = el(
        "tr",
        None,
        [el("th", None, h) for h in ("Slot", "State", "Cpus", "Memory (MB)", "User", "Job")],
    )
    table = el("table", {"class": "slots"}, el("thead", None, head), el("tbody", None, rows))
    counts = [(name, float(n)) for name, n in by_state.most_common()]
    if not slots:
        table = el("p", {"class": "empty"}, "No slots have reported to the collector.")
    return join([meter, table]), counts


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def resources_table(found: Sequence[ResourceSummary], now: float) -> Html:
    """Each grid resource: up or down, its jobs by state, its last poll, its holds."""
    if not found:
        return el("p", {"class": "empty"}, "No grid universe jobs in the queue.")
    rows = []
    for r in found:
        health = (
            el("span", {"class": "badge st-held"}, f"down since {when(r.down_since)}")
            if r.down_since is not None
            else el("span", {"class": "badge st-running"}, "up")
            if r.last_update is not None
            else el("span", {"class": "badge"}, "not marked down; no status from it yet")
        )
        states = ", ".join(f"{name} {n}" for name, n in sorted(r.states.items()))
        polled = when(r.last_update, now) if r.last_update else "no answer yet"
        poll = (
            f"{when(r.last_poll[0], now)}, took {r.last_poll[1]:.2f} s"
            if r.last_poll is not None
            else "not published (yet)"
        )
        holds = el(
            "ul",
            None,
            [
                el("li", None, f"{n} jobs: {why}" if n != 1 else f"1 job: {why}")
                for why, n in r.holds.items()
            ],
        )
        rows.append(
            el(
                "tr",
                {"data-resource": r.name, "data-down": "1" if r.down_since else "0"},
                el("td", None, el("code", None, r.name)),
                el("td", None, health),
                el("td", None, states),
                el("td", None, polled),
                el("td", {"class": "poll"}, poll),
                el("td", None, holds if r.holds else "none"),
            )
        )
    head = el(
        "tr",
        None,
        [
            el("th", None, h)
            for h in (
                "Resource",
                "State",
                "Jobs",
                "Last status from it",
                "Last poll",
                "Holds by reason",
            )
        ],
    )
    return el("table", {"class": "resources"}, el("thead", None, head), el("tbody", None, rows))


def routes_page(
    config: RouterConfig,
    routed: Mapping[str, Counter[str]],
    unrouted: Iterable[tuple[ClassAd, tuple[RouteVerdict, ...], str | None]],
) -> Html:
    """The router's routes, the jobs each has taken by state, and why jobs wait unrouted."""
    parts: list[Html] = [el("p", {"class": "problem"}, problem) for problem in config.problems]
    if not config.routes:
        parts.append(
            el(
                "p",
                {"class": "empty"},
                "No routes are configured (JOB_ROUTER_ROUTE_NAMES and "
                "JOB_ROUTER_ROUTE_<name> in htgrid.conf).",
            )
        )
        return join(parts)
    rows = []
    for route in config.routes:
        counts = routed.get(route.name, Counter())
        rows.append(
            el(
                "tr",
                {"data-route": route.name, "data-jobs": sum(counts.values())},
                el("td", None, route.name),
                el("td", None, el("code", None, route.grid_resource or "")),
                el("td", {"class": "num"}, f"{route.max_jobs} / {route.max_idle_jobs}"),
                el("td", None, ", ".join(f"{s} {n}" for s, n in sorted(counts.items())) or "none"),
            )
        )
    head = el(
        "tr",
        None,
        [
            el("th", None, h)
            for h in ("Route", "Grid resource", "Max jobs / idle", "Jobs routed by state")
        ],
    )
    parts.append(el("table", {"class": "routes"}, el("thead", None, head), el("tbody", None, rows)))
    waiting = []
    for ad, verdicts, why_not in unrouted:
        reasons = [el("li", None, why_not)] if why_not else []
        reasons += [
            el(
                "li",
                None,
                f"route {v.route}: " + (v.error or ("matches" if v.matched else f"no: {v.reason}")),
            )
            for v in verdicts
        ]
        job = _job_id(ad)
        waiting.append(
            el("li", {"data-unrouted": job}, link(f"/web/jobs/{job}", job), el("ul", None, reasons))
        )
    parts.append(el("h2", None, "Idle jobs not routed, and why"))
    parts.append(
        el("ul", {"class": "why"}, waiting) if waiting else el("p", {"class": "empty"}, "None.")
    )
    return join(parts)
