"""The web view's parts without a browser: escaping, the charts' numbers, grid
resources and routes as their pages show them, and who is shown which jobs."""

from __future__ import annotations

import re
from pathlib import Path

from htgrid._privsep import OwnerPolicy
from htgrid.classad import ClassAd
from htgrid.queue import Identity
from htgrid.router import RouterConfig, explain_routes
from htgrid.web._annex import annex_page
from htgrid.web._data import (
    Sources,
    job_outputs,
    mine,
    resources,
    running_by_site,
    state_series,
    throughput,
    with_polls,
)
from htgrid.web._html import Html, el, link
from htgrid.web._pages import job_page, queue_table, resources_table, routes_page
from htgrid.web._svg import bar_chart, step_chart

EVIL = '"><script>alert(1)</script>'


def test_text_and_attribute_values_are_escaped_and_markup_is_not() -> None:
    page = el("td", {"title": EVIL}, EVIL, Html("<br>"))
    assert "<script>" not in page
    assert page == (
        '<td title="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;">'
        "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;<br></td>"
    )
    assert link("/web/", "x", {"constraint": 'a == "&"'}) == (
        '<a href="/web/?constraint=a+%3D%3D+%22%26%22">x</a>'
    )


def test_a_job_ads_values_show_as_text_in_the_tables_and_charts() -> None:
    ad = ClassAd(
        {"ClusterId": 1, "ProcId": 0, "Owner": "alice", "JobStatus": 2, "QDate": 100,
         "Cmd": EVIL, "GridResource": EVIL, "JobUniverse": 9, "HoldReason": EVIL}
    )  # fmt: skip
    html = queue_table([ad], 200, key="queue", more=False)
    html += bar_chart("sites", EVIL, running_by_site([ad]))
    html += resources_table(resources([ad]), 200)
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_users_are_narrowed_to_their_own_jobs_and_administrators_are_not() -> None:
    assert mine(Identity("alice")) == 'Owner == "alice"'
    assert mine(Identity("alice"), "JobStatus == 2") == '(Owner == "alice") && (JobStatus == 2)'
    # A name is a ClassAd string, never expression text.
    assert mine(Identity('x" || true || "')) == r'Owner == "x\" || true || \""'
    assert mine(Identity("root", admin=True), "JobStatus == 2") == "JobStatus == 2"
    assert mine(Identity("root", admin=True)) is None


def _job(status: int, qdate: float, start: float | None, entered: float, **more: object) -> ClassAd:
    attrs: dict[str, object] = {
        "JobStatus": status,
        "QDate": qdate,
        "EnteredCurrentStatus": entered,
    }
    if start is not None:
        attrs["JobCurrentStartDate"] = start
    return ClassAd({**attrs, **more})


def test_jobs_by_state_over_time_follow_the_times_in_their_ads() -> None:
    ads = [
        _job(1, 100, None, 100),  # idle since 100
        _job(2, 110, 150, 150),  # idle 110-150, running since
        _job(4, 120, 130, 170, CompletionDate=170),  # idle 120-130, running 130-170
        _job(5, 140, 160, 180),  # idle 140-160, running 160-180, held since 180
    ]
    series = state_series(ads, 90, 200)
    assert series["Idle"] == [(100, 1), (110, 2), (120, 3), (130, 2), (140, 3), (150, 2), (160, 1)]
    assert series["Running"] == [(130, 1), (150, 2), (160, 3), (170, 2), (180, 1)]
    assert series["Held"] == [(180, 1)]
    svg = step_chart("states", "Jobs by state", series, 90, 200)
    last = dict(re.findall(r'data-series="(\w+)" data-last="(\d+)"', svg))
    assert last == {"Idle": "1", "Running": "1", "Held": "1"}


def test_throughput_counts_the_jobs_completed_in_the_window_per_site() -> None:
    ads = [
        _job(4, 0, 10, 3000, CompletionDate=3000, GridResource="batch slurm", JobUniverse=9),
        _job(4, 0, 10, 3500, CompletionDate=3500, GridResource="batch slurm", JobUniverse=9),
        _job(4, 0, 10, 100, CompletionDate=100, GridResource="batch pbs", JobUniverse=9),
        _job(3, 0, 10, 3000, GridResource="batch pbs", JobUniverse=9),  # removed
    ]
    assert throughput(ads, 1800, 5400) == [("batch slurm", 2.0)]


def test_grid_resources_say_down_last_status_and_holds_by_reason() -> None:
    grid = {"JobUniverse": 9, "GridResource": "batch slurm"}
    ads = [
        _job(2, 0, 5, 5, LastRemoteStatusUpdate=50, **grid),
        _job(1, 0, None, 0, GridResourceUnavailableTime=40, LastRemoteStatusUpdate=30, **grid),
        _job(5, 0, None, 0, HoldReason="Failed to submit", **grid),
        _job(5, 0, None, 0, HoldReason="Failed to submit", **grid),
        _job(2, 0, 5, 5, JobUniverse=9, GridResource="batch pbs", LastRemoteStatusUpdate=60),
    ]
    pbs, slurm = resources(ads)
    assert (pbs.name, pbs.down_since, pbs.states) == ("batch pbs", None, {"Running": 1})
    assert slurm.states == {"Running": 1, "Idle": 1, "Held": 2}
    assert (slurm.down_since, slurm.last_update) == (40, 50)
    assert slurm.holds == {"Failed to submit": 2}
    html = resources_table([pbs, slurm], 100)
    assert 'data-resource="batch slurm" data-down="1"' in html
    assert "2 jobs: Failed to submit" in html


def test_a_resources_last_poll_comes_from_its_grid_ad_under_the_grid_managers_name() -> None:
    ads = [
        _job(2, 0, 5, 5, JobUniverse=9, GridResource="pbs"),  # the legacy form
        _job(2, 0, 5, 5, JobUniverse=9, GridResource="batch  slurm"),
    ]
    grid_ads = [
        ClassAd({"Name": "batch pbs", "LastStatusPoll": 90, "LastStatusPollDuration": 0.25}),
        ClassAd({"Name": "batch pbs", "LastStatusPoll": 70, "LastStatusPollDuration": 9.0}),
    ]
    slurm, pbs = with_polls(resources(ads), grid_ads)
    assert (pbs.last_poll, slurm.last_poll) == ((90, 0.25), None)
    html = resources_table([pbs, slurm], 100)
    assert "took 0.25 s" in html and "not published (yet)" in html


def test_the_routes_page_says_why_a_job_is_not_routed() -> None:
    config = RouterConfig.from_knobs(
        {
            "JOB_ROUTER_ROUTE_NAMES": "Big",
            "JOB_ROUTER_ROUTE_Big": 'REQUIREMENTS RequestCpus > 4\nGridResource = "batch slurm"',
        }
    )
    ad = ClassAd({"ClusterId": 3, "ProcId": 0, "Owner": "alice", "JobStatus": 1,
                  "RequestCpus": 1, "JobUniverse": 5})  # fmt: skip
    verdicts, why_not = explain_routes(ad, config, source_id="3.0")
    html = routes_page(config, {}, [(ad, verdicts, why_not)])
    assert 'data-route="Big"' in html and 'data-unrouted="3.0"' in html
    assert "route Big: no:" in html and "RequestCpus" in html


def test_the_annexes_page_counts_down_the_lease_and_shows_users_their_own() -> None:
    ads = [
        ClassAd({"Name": "a", "Owner": "alice", "LeaseExpiration": 1000 + 5400, "Joined": 2}),
        ClassAd(
            {
                "Name": "b",
                "Owner": "bob",
                "LeaseExpiration": 900,
                "Spend": 1.5,
                "SpendPricesKnown": False,
            }
        ),
    ]
    alice = annex_page(ads, None, Identity("alice", admin=False), 1000)
    assert 'data-annex="a"' in alice and 'data-annex="b"' not in alice
    assert "90 min left" in alice
    admin = annex_page(ads, None, Identity("root", admin=True), 1000)
    assert "ended 100 s ago" in admin and "~$1.50 (some instance types not priced)" in admin
    assert "No annexes" in annex_page([], None, Identity("alice", admin=False), 1000)


def test_a_jobs_page_shows_the_output_files_it_transfers_back(tmp_path: Path) -> None:
    import asyncio
    import getpass

    (tmp_path / "result.txt").write_text("the answer is 42\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01binary")
    (tmp_path / "plots").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "renamed.log").write_text("remapped\n")
    ad = ClassAd(
        {
            "Owner": getpass.getuser(),  # read as the owner: the test's own user
            "Iwd": str(tmp_path),
            "Out": "missing.out",
            "TransferOutput": "result.txt,sub/blob.bin, plots/ ,log.txt",
            "TransferOutputRemaps": f"log.txt={tmp_path / 'elsewhere' / 'renamed.log'}",
        }
    )
    policy = OwnerPolicy(allow_root=True)  # the tests may run as root
    src = Sources(jobs=None, home=tmp_path, collector=lambda: None, policy=policy)  # type: ignore[arg-type]
    files = {f.label: f for f in asyncio.run(job_outputs(src, ad))}
    assert files["Out"].size is None  # named, not there yet
    assert files["File result.txt"].text == "the answer is 42\n"
    assert files["File sub/blob.bin"].text == "(binary: not shown)"
    assert files["File plots/"].text == "a directory"
    assert files["File log.txt"].text == "remapped\n"
    html = job_page(ad, True, [], None, list(files.values()), 0)
    assert 'data-output="File result.txt"' in html and "the answer is 42" in html
