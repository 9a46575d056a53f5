"""The web view in a real browser (headless chromium): users sign in with a token of the
pool, watch their jobs change state on the page without reloading it, read a job's
events and output, and do not see other users' jobs; the local proxy lets the host's
user in without a token. Screenshots are kept (see conftest)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from htgrid.classad import ClassAd, quote
from htgrid.net import Jobs, ScheddClient
from htgrid.queue import JobAction, JobId
from htgrid.testing import WHOLE_POOL, PersonalPool, run_cli, wait_for

DOMAIN = "web.test"
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
#: The job runs until its directory holds `go`, so the test says when it ends.
SCRIPT = "echo hello from the job\nwhile [ ! -e go ]; do sleep 0.1; done\necho done\n"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pool(
    shared_tmp_factory: Callable[[str], Path], test_users: tuple[str, ...]
) -> Iterator[PersonalPool]:
    config = {
        "TRUST_DOMAIN": DOMAIN,
        "SCHEDD_NAME": "queue@web",
        "NEGOTIATOR_INTERVAL": 1,
        # The grid page's last poll: the grid manager's Grid ads, published often.
        "GRIDMANAGER_JOB_PROBE_INTERVAL": 1,
        "GRIDMANAGER_COLLECTOR_UPDATE_INTERVAL": 1,
        # A CE route for the routes page: only jobs of more than 4 CPUs take it.
        "JOB_ROUTER_ENTRIES": '[ name = "Big"; Requirements = TARGET.RequestCpus > 4; '
        'GridResource = "batch slurm"; ]',
    }
    home = shared_tmp_factory("web") / "home"
    with PersonalPool(home, daemons=WHOLE_POOL, fsync=False, config=config) as p:
        yield p


def _job_dir(base: Path, user: str) -> Path:
    import pwd

    path = base / user
    path.mkdir(mode=0o755)
    (path / "job.sh").write_text(SCRIPT)
    account = pwd.getpwnam(user)
    os.chown(path, account.pw_uid, account.pw_gid)
    return path


def _submit(client: ScheddClient, iwd: Path, **attrs: object) -> JobId:
    """A local universe job running job.sh in `iwd`, logging to job.log there."""
    ad = ClassAd(
        {
            "Cmd": "/bin/sh",
            "Arguments": "job.sh",
            "JobUniverse": 12,
            "Iwd": str(iwd),
            "Out": "out.txt",
            "Err": "err.txt",
            "UserLog": str(iwd / "job.log"),
            **attrs,
        }
    )
    (job,) = client.submit(client.reserve_cluster(), ad, [ClassAd()])
    return job


def _sign_in(driver: Any, pool: PersonalPool, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{pool.url}/web/")
    wait_for(lambda: "/web/login" in driver.current_url, 30, what="the sign-in form")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin").click()
    wait_for(lambda: driver.current_url.endswith("/web/"), 30, what="the queue page")


def _css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _text(driver: Any, selector: str) -> str:
    """The text of what `selector` finds, "" while the live update replaces it."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        return "".join(found.text for found in _css(driver, selector))
    except StaleElementReferenceException:  # swapped by the 2 s refresh meanwhile
        return ""


def _status_of(driver: Any, table: str, job: JobId) -> str | None:
    from selenium.common.exceptions import StaleElementReferenceException

    rows = _css(driver, f'[data-table="{table}"] tr[data-job="{job}"]')
    try:
        return rows[0].get_attribute("data-status") if rows else None
    except StaleElementReferenceException:  # swapped by the 2 s refresh meanwhile
        return None


def test_users_watch_their_jobs_run_and_see_no_one_elses(
    pool: PersonalPool,
    browser: Callable[..., Any],
    shots: Any,
    shared_tmp_factory: Callable[[str], Path],
) -> None:
    base = shared_tmp_factory("jobs")
    alice_dir, bob_dir = _job_dir(base, "alice"), _job_dir(base, "bob")
    with pool.remote(pool.token(f"alice@{DOMAIN}")) as alice:
        job = _submit(alice, alice_dir, JobBatchName=XSS)
    with pool.remote(pool.token(f"bob@{DOMAIN}")) as bob:
        bobs = _submit(bob, bob_dir)
    cert = pool.home / "etc" / "ca" / "server.crt"

    # alice signs in with her token and sees her job run, the page never reloaded.
    page = browser(pin=cert)
    _sign_in(page, pool, pool.token(f"alice@{DOMAIN}"))
    assert _css(page, ".who")[0].text == "alice"
    page.execute_script("window.__same_page = 'yes'")
    wait_for(lambda: _status_of(page, "queue", job) == "Running", 60, what="alice's job running")
    assert _css(page, '[data-state="Running"][data-count="1"]'), "the totals say 1 running"
    shots.take(page, "alice-running")
    assert _status_of(page, "queue", bobs) is None, "alice sees bob's job"
    assert str(bobs) not in page.page_source
    (alice_dir / "go").touch()
    wait_for(
        lambda: _status_of(page, "history", job) == "Completed", 60, what="alice's job completed"
    )
    shots.take(page, "alice-completed")
    assert page.execute_script("return window.__same_page") == "yes", "the page was reloaded"
    chart = _css(page, 'svg[data-chart="states"]')
    assert chart, "no chart of jobs by state"

    # Her job's page: the events of its log, its output, its ad with the <script> as text.
    page.get(f"{pool.url}/web/jobs/{job}")
    wait_for(lambda: _css(page, '[data-event="005"]'), 30, what="the terminated event")
    events = [e.get_attribute("data-event") for e in _css(page, "[data-event]")]
    assert events[0] == "000" and "001" in events and events[-1] == "005"
    assert "hello from the job" in _css(page, '[data-output="Out"] pre')[0].text
    # Shown as the ClassAd string it is, quotes escaped: text, not markup.
    assert quote(XSS) in page.find_element("css selector", "table.ad").text
    assert page.execute_script("return window.__xss") is None
    assert not [s for s in _css(page, "script") if "__xss" in (s.get_attribute("innerHTML") or "")]
    shots.take(page, "alice-job")

    # bob sees his own job, not alice's: not in the list, and not by its address.
    other = browser(pin=cert)
    _sign_in(other, pool, pool.token(f"bob@{DOMAIN}"))
    wait_for(lambda: _status_of(other, "queue", bobs) == "Running", 60, what="bob's job running")
    assert _status_of(other, "queue", job) is None and _status_of(other, "history", job) is None
    assert XSS not in other.page_source and "alice" not in other.page_source
    other.get(f"{pool.url}/web/jobs/{job}")
    assert (
        "not one of bob's jobs" in other.page_source
        and "hello from the job" not in other.page_source
    )
    shots.take(other, "bob-denied")
    # The queue's filters: Held hides his running job, Running shows it again.
    from selenium.webdriver.support.ui import Select

    for state, shown in (("held", None), ("running", "Running")):
        other.get(f"{pool.url}/web/")
        wait_for(lambda: _css(other, "form.filters"), 30, what="the queue's filters")
        Select(other.find_element("css selector", "select[name=status]")).select_by_value(state)
        other.find_element("css selector", "form.filters button").click()
        wait_for(lambda s=state: f"status={s}" in other.current_url, 30, what="the filter")
        wait_for(lambda: _css(other, ".who"), 30, what="the filtered page")
        assert _status_of(other, "queue", bobs) == shown, state
    (bob_dir / "go").touch()


def test_a_refused_token_goes_back_to_the_sign_in_form(
    pool: PersonalPool, browser: Callable[..., Any], shots: Any
) -> None:
    page = browser(pin=pool.home / "etc" / "ca" / "server.crt")
    _sign_in_raw = pool.token(f"alice@{DOMAIN}")[:-4] + "AAAA"  # its signature broken
    page.get(f"{pool.url}/web/")
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "token").send_keys(_sign_in_raw)
    page.find_element(By.ID, "signin").click()
    wait_for(lambda: _css(page, ".problem"), 30, what="the refusal")
    assert "/web/login" in page.current_url
    assert "refused" in _css(page, ".problem")[0].text
    shots.take(page, "refused")


def test_the_pool_page_shows_the_slots(
    pool: PersonalPool, browser: Callable[..., Any], shots: Any
) -> None:
    page = browser(pin=pool.home / "etc" / "ca" / "server.crt")
    _sign_in(page, pool, pool.token(f"carol@{DOMAIN}"))
    page.get(f"{pool.url}/web/pool")
    wait_for(lambda: _css(page, "tr[data-slot]"), 60, what="a slot on the pool page")
    use = _css(page, "p.use")[0]
    assert int(use.get_attribute("data-cpus") or 0) >= 1
    assert _css(page, 'svg[data-chart="slots"]')
    shots.take(page, "pool")


@pytest.fixture
def local_proxy(pool: PersonalPool) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, "HTGRID_HOME": str(pool.home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "htgrid", "web", "--home", str(pool.home)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("htgrid web: open http://127.0.0.1:"), line
        yield proc, line.split()[3]
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_local_user_comes_in_through_the_proxy_with_its_key(
    pool: PersonalPool,
    local_proxy: tuple[subprocess.Popen[str], str],
    browser: Callable[..., Any],
    shots: Any,
    tmp_path: Path,
) -> None:
    (tmp_path / "grid.sub").write_text(
        "universe = grid\ngrid_resource = batch fork\nexecutable = /bin/sleep\n"
        "arguments = 300\ntransfer_executable = false\nqueue\n"
    )
    status, out, err = run_cli(pool.home, "submit", str(tmp_path / "grid.sub"))
    assert status == 0, err
    grid_job = re.search(r"submitted to cluster (\d+)", out)
    assert grid_job, out
    _, url = local_proxy
    base = url.split("/web/")[0]
    # Without the key, or addressed by another name, the proxy lends nobody its user.
    assert httpx.get(f"{base}/web/").status_code == 403
    assert httpx.get(f"{base}/web/?key=wrong").status_code == 403
    port = base.rsplit(":", 1)[1]
    assert httpx.get(url, headers={"host": f"evil.example:{port}"}).status_code == 403
    page = browser()
    page.get(url)
    wait_for(lambda: _css(page, ".who"), 30, what="the queue page")
    assert "key=" not in page.current_url
    assert _css(page, ".who")[0].text == "root"  # the test's user: an administrator
    assert _css(page, ".badge.admin")
    shots.take(page, "local-proxy")
    # The grid resources page: the fork resource up, its job running there.
    page.get(url.split("?")[0] + "grid")
    row = 'tr[data-resource="batch fork"][data-down="0"]'
    wait_for(lambda: "Running 1" in _text(page, row), 90,
             what="the grid job running on batch fork")  # fmt: skip
    # Its last status poll, from the grid manager's ad for the resource in the collector.
    wait_for(lambda: "took" in _text(page, f"{row} td.poll"), 60, what="the resource's last poll")
    shots.take(page, "grid")

    # condor_status -grid: the same resource, its one job running.
    # The grid manager advertises the resource's counts now and then: the next ad has it.
    def grid_status() -> list[str]:
        status, out, err = run_cli(
            pool.home, "status", "-grid", "-af", "Name", "NumJobs", "RunningJobs"
        )
        assert status == 0, err
        return out.splitlines()

    wait_for(lambda: "batch fork 1 1" in grid_status(), 60, what="the resource ad's running job")
    run_cli(pool.home, "rm", grid_job.group(1))


def _annex_ad(name: str, owner: str, lease_end: int) -> str:
    return (
        f'MyType = "Annex"\nName = "{name}"\nAnnexName = "{name}"\nOwner = "{owner}"\n'
        f'Cloud = "ec2"\nRegion = "us-east-1"\nLeaseExpiration = {lease_end}\nRequested = 4\n'
        "Pending = 1\nBooting = 1\nJoined = 2\nTerminated = 0\nBusySlots = 3\nIdleSlots = 1\n"
        "Spend = 0.42\nSpendPricesKnown = true\nClassAdLifetime = 600\n"
    )


def test_the_annexes_page_shows_ones_own_annexes_and_sign_out_ends_the_session(
    pool: PersonalPool, browser: Callable[..., Any], shots: Any, tmp_path: Path
) -> None:
    import time

    from selenium.webdriver.common.by import By

    ads = tmp_path / "annexes.ad"
    end = int(time.time()) + 2 * 3600
    ads.write_text(_annex_ad("carols", "carol", end) + "\n" + _annex_ad("daves", "dave", end))
    status, _, err = run_cli(pool.home, "advertise", "-multiple", "UPDATE_AD_GENERIC", str(ads))
    assert status == 0, err
    page = browser(pin=pool.home / "etc" / "ca" / "server.crt")
    _sign_in(page, pool, pool.token(f"carol@{DOMAIN}"))
    page.get(f"{pool.url}/web/annexes")
    row = 'tr[data-annex="carols"]'
    wait_for(lambda: _css(page, row), 30, what="carol's annex on the annexes page")
    text = _text(page, row)
    assert "left (until" in text and "~$0.42" in text and "3 / 1" in text, text
    assert not _css(page, 'tr[data-annex="daves"]')  # another user's annex is not shown
    shots.take(page, "annexes")
    # Signing out ends the session: the page goes back to the sign-in form.
    page.find_element(By.CSS_SELECTOR, "form[action='/web/logout'] button").click()
    wait_for(lambda: "/web/login" in page.current_url, 30, what="the sign-in form")
    page.get(f"{pool.url}/web/annexes")
    wait_for(lambda: "/web/login" in page.current_url, 30, what="the sign-in form again")
    assert not _css(page, row)


def test_the_routes_page_says_why_an_idle_job_is_not_routed(
    pool: PersonalPool,
    browser: Callable[..., Any],
    shots: Any,
    shared_tmp_factory: Callable[[str], Path],
) -> None:
    iwd = _job_dir(shared_tmp_factory("routes"), "carol")
    with pool.remote(pool.token(f"carol@{DOMAIN}")) as carol:
        # A vanilla job no slot can take: it stays idle, and the route wants more CPUs.
        job = _submit(carol, iwd, JobUniverse=5, RequestCpus=1, RequestMemory=10**7)
    page = browser(pin=pool.home / "etc" / "ca" / "server.crt")
    _sign_in(page, pool, pool.token(f"carol@{DOMAIN}"))
    page.get(f"{pool.url}/web/routes")
    wait_for(lambda: _css(page, 'tr[data-route="Big"]'), 30, what="the route on the page")
    why = f'[data-unrouted="{job}"]'
    wait_for(lambda: "RequestCpus" in _text(page, why), 30, what="why the job is not routed")
    assert "route Big: no" in _text(page, why)
    shots.take(page, "routes")
    with pool.remote(pool.token(f"carol@{DOMAIN}")) as carol:
        carol.act(JobAction.Remove, Jobs.of((job,)))
