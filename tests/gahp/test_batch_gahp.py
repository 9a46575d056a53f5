"""The batch GAHP's handlers in process: submit ads, staging, status batching, job commands."""

from __future__ import annotations

import asyncio
import itertools
import signal
import stat
from collections.abc import Awaitable, Sequence
from pathlib import Path

import pytest

import htgrid.classad as classad
from htgrid.backends.batch._base import JobState, NativeStatus
from htgrid.backends.batch._jobad import InvalidSubmitAd, parse_submit_ad, split_v2
from htgrid.backends.batch._registry import create_backend, known_backends, register
from htgrid.backends.batch.server import BatchGahp, BatchOptions, parse_blah_id, status_ad
from htgrid.gahp import Call, Credentials

from ._fakes import FakeBackend, ManualClock, sleeping

_ids = itertools.count(1)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def call(command: str, *args: str) -> Call:
    return Call(command, next(_ids), tuple(args), Credentials())


def ad(iwd: Path, **attrs: object) -> str:
    body: dict[str, object] = {"gridtype": "fake", "Cmd": "/bin/true", "Iwd": str(iwd)}
    body.update(attrs)
    parts = []
    for name, value in body.items():
        text = classad.quote(value) if isinstance(value, str) else str(value).lower()
        parts.append(f"{name} = {text}")
    return "[ " + "; ".join(parts) + " ]"


@pytest.fixture
def fake() -> FakeBackend:
    backend = FakeBackend()
    register("fake", lambda options: backend)
    return backend


def make_gahp(tmp_path: Path, clock: ManualClock | None = None) -> BatchGahp:
    options = BatchOptions(scratch=tmp_path / "scratch", status_window=0.5, status_max_age=20)
    return BatchGahp(options, clock=clock or ManualClock())


async def submit(gahp: BatchGahp, text: str) -> str:
    result = await gahp.submit(call("BLAH_JOB_SUBMIT", text))
    assert result[:2] == ("0", "No error"), result
    return result[2]


async def status(gahp: BatchGahp, clock: ManualClock, blah_id: str) -> Sequence[str]:
    task = asyncio.create_task(gahp.status(call("BLAH_JOB_STATUS", blah_id)))
    while not task.done() and not clock.sleepers:
        await asyncio.sleep(0.001)
    await clock.advance(1)
    return await task


def parsed(ad_text: str) -> classad.ClassAd:
    return classad.ClassAd(ad_text)


# ---- the submit ad ----------------------------------------------------------------------------


def test_submit_ad_attributes(tmp_path: Path) -> None:
    request = parse_submit_ad(
        ad(
            tmp_path,
            gridtype="SLURM",
            Arguments="a 'b c' 'it''s'",
            Args="ignored",
            Environment="A=1 B='x y'",
            Env="C=3",
            In="in.txt",
            Out="/dev/null",
            Err="err.txt",
            TransferInput="x, y z",
            TransferOutput="o1,o2",
            TransferOutputRemaps="o1 = /tmp/o1; o2=sub/o2",
            Queue="short",
            BatchProject="proj",
            BatchRuntime=600,
            RequestMemory=2048,
            NodeNumber=8,
            HostNumber=2,
            GPUNumber=1,
            BatchExtraSubmitArgs="--exclusive",
            ClientJobId="schedd#12.0#1700000000",
            StageCmd=False,
        ),
        default_iwd="/",
        new_tag="unused",
    )
    assert request.lrms == "slurm"
    assert request.arguments == ("a", "b c", "it's")
    assert request.environment == {"A": "1", "B": "x y"}
    assert (request.stdin, request.stdout, request.stderr) == ("in.txt", None, "err.txt")
    assert request.transfer_input == ("x", "y", "z")
    assert request.transfer_output == ("o1", "o2")
    assert request.remaps == {"o1": "/tmp/o1", "o2": "sub/o2"}
    assert (request.queue, request.project, request.runtime_seconds) == ("short", "proj", 600)
    assert (request.memory_mb, request.cpus, request.nodes, request.gpus) == (2048, 8, 2, 1)
    assert request.extra_args == "--exclusive"
    assert request.tag == "schedd#12.0#1700000000" and request.tag_from_client
    assert not request.stage_cmd
    assert request.iwd == str(tmp_path)


def test_submit_ad_v1_syntax_and_defaults(tmp_path: Path) -> None:
    request = parse_submit_ad(
        ad(tmp_path, Args="-l  -a", Env="A=1;B=2 3", SMPGranularity=4),
        default_iwd="/",
        new_tag="fresh",
    )
    assert request.arguments == ("-l", "-a")
    assert request.environment == {"A": "1", "B": "2 3"}
    assert request.tag == "fresh" and not request.tag_from_client
    assert (request.cpus, request.nodes) == (4, 1)
    assert request.stage_cmd


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("[ Cmd = ", 1, "Error parsing classad"),
        ('[ Cmd = "/bin/true" ]', 1, "Missing gridtype"),
        ('[ gridtype = "fork" ]', 7, "Cannot parse Cmd"),
        ('[ gridtype = "fork"; Cmd = "x"; Arguments = "\'open" ]', 1, "Unbalanced quote"),
    ],
)
def test_bad_submit_ads(text: str, code: int, message: str) -> None:
    with pytest.raises(InvalidSubmitAd, match=message) as caught:
        parse_submit_ad(text, default_iwd="/", new_tag="t")
    assert caught.value.code == code


def test_split_v2() -> None:
    assert split_v2("  a  'b  c'd '' 'x''y' ") == ["a", "b  cd", "", "x'y"]


def test_blah_ids() -> None:
    assert parse_blah_id("slurm/20260101/123@cluster") == ("slurm", "123@cluster")
    assert parse_blah_id("Fork/x/y/42") == ("fork", "42")
    for bad in ("fork", "fork/", "/20260101/1", "fork/20260101/"):
        with pytest.raises(ValueError, match="Malformed"):
            parse_blah_id(bad)


def test_registry() -> None:
    assert {"fork", "slurm", "sge", "pbs", "lsf"} <= set(known_backends())
    from htgrid.backends.batch._registry import BackendOptions, UnknownBackend

    with pytest.raises(UnknownBackend, match="no batch system named 'nqs'"):
        create_backend("nqs", BackendOptions("nqs", Path("/tmp")))


# ---- staging --------------------------------------------------------------------------------


def test_staging_in_and_out(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        iwd = tmp_path / "iwd"
        (iwd / "data").mkdir(parents=True)
        (iwd / "data" / "a.txt").write_text("A")
        (iwd / "stdin.txt").write_text("typed\n")
        (iwd / "run.sh").write_text("#!/bin/sh\n")
        proxy = iwd / "x509up"
        proxy.write_text("old proxy")
        blah_id = await submit(
            gahp,
            ad(
                iwd,
                Cmd="run.sh",
                In="stdin.txt",
                Out="job.out",
                Err="job.err",
                TransferInput="data/a.txt,data",
                TransferOutput="result.txt,extra.txt",
                TransferOutputRemaps="extra.txt = renamed.txt",
                x509UserProxy="x509up",
            ),
        )
        lrms, date, native_id = blah_id.split("/")
        assert lrms == "fake" and date == "20270115"
        spec = fake.submitted[0]
        job_dir = spec.job_dir
        assert job_dir.parent == tmp_path / "scratch" / "jobs"
        assert spec.executable == str(job_dir / "run.sh")
        assert (job_dir / "run.sh").stat().st_mode & stat.S_IXUSR
        assert (job_dir / "a.txt").read_text() == "A"
        assert (job_dir / "data" / "a.txt").read_text() == "A"
        assert (spec.stdin, spec.stdout, spec.stderr) == (
            "_condor_stdin",
            "_condor_stdout",
            "_condor_stderr",
        )
        assert (job_dir / "_condor_stdin").read_text() == "typed\n"
        copy = job_dir / "x509up"
        assert spec.environment["X509_USER_PROXY"] == str(copy)
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
        proxy.with_name("x509new").write_text("new proxy")
        refreshed = await gahp.refresh_proxy(
            call("BLAH_JOB_REFRESH_PROXY", blah_id, str(iwd / "x509new"))
        )
        assert refreshed == ("0", "Proxy renewed")
        assert copy.read_text() == "new proxy"
        # The job runs...
        running = await status(gahp, clock, blah_id)
        assert running[:3] == ("0", "No error", "1")
        (job_dir / "_condor_stdout").write_text("out\n")
        (job_dir / "result.txt").write_text("R")
        (job_dir / "extra.txt").write_text("E")
        fake.jobs[native_id] = NativeStatus(
            native_id, JobState.COMPLETED, exit_code=0, wallclock_seconds=12.5
        )
        await clock.advance(30)
        done = await status(gahp, clock, blah_id)
        assert done[:3] == ("0", "No error", "4")
        final = parsed(done[3])
        assert final["ExitCode"] == 0 and final["ExitBySignal"] is False
        assert final["RemoteWallClockTime"] == 12.5
        assert final["BatchJobId"] == native_id
        assert (iwd / "job.out").read_text() == "out\n"
        assert (iwd / "job.err").read_text() == ""
        assert (iwd / "result.txt").read_text() == "R"
        assert (iwd / "renamed.txt").read_text() == "E"
        # The batch system forgets the job; the answer does not change.
        del fake.jobs[native_id]
        queries = len(fake.queries)
        await clock.advance(60)
        assert await status(gahp, clock, blah_id) == done
        assert len(fake.queries) == queries
        # ...and a restarted server knows too.
        again = make_gahp(tmp_path, clock)
        assert await status(again, clock, blah_id) == done
        completed = await gahp.refresh_proxy(call("X", blah_id, str(proxy)))
        assert completed == ("0", "No proxy to renew - Job completed")

    run(main())


def test_a_missing_output_holds_the_job(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        blah_id = await submit(gahp, ad(tmp_path, TransferOutput="never.txt"))
        fake.finish(blah_id.rsplit("/", 1)[1], 0)
        result = await status(gahp, clock, blah_id)
        assert result[:3] == ("0", "No error", "5")
        held = parsed(result[3])
        assert held["JobStatus"] == 5 and held["HoldReasonCode"] == 12
        assert "never.txt" in held["HoldReason"] and held["HoldReasonSubCode"] == 2

    run(main())


def test_submit_errors(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        gahp = make_gahp(tmp_path)
        missing = await gahp.submit(call("S", ad(tmp_path, TransferInput="nope.txt")))
        assert missing[0] == "1" and "nope.txt" in missing[1] and missing[2] == "N/A"
        unknown = await gahp.submit(call("S", ad(tmp_path, gridtype="nqs")))
        assert unknown[0] == "3" and unknown[2] == "N/A"
        url = await gahp.submit(call("S", ad(tmp_path, TransferInput="http://x/y")))
        assert url[0] == "1" and "URL" in url[1]
        assert fake.submitted == []
        assert list((tmp_path / "scratch" / "jobs").iterdir()) == []

    run(main())


def test_a_repeated_submit_returns_the_live_job(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        gahp = make_gahp(tmp_path)
        text = ad(tmp_path, JobDirectory="home_bl_pool_schedd_1.0_17")
        first = await submit(gahp, text)
        assert await submit(gahp, text) == first
        assert len(fake.submitted) == 1
        fake.finish(first.rsplit("/", 1)[1])
        second = await submit(gahp, text)
        assert second != first and len(fake.submitted) == 2
        assert fake.submitted[1].job_dir.name == "home_bl_pool_schedd_1.0_17.2"

    run(main())


def test_a_submit_lost_in_a_crash_is_found_by_tag(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        gahp = make_gahp(tmp_path)
        text = ad(tmp_path, ClientJobId="7.0")
        request = parse_submit_ad(text, default_iwd="/", new_tag="x")
        spec, _ = gahp.store.stage_in(request)
        native_id = await fake.submit(spec)  # ...and the server died before writing it down
        blah_id = await submit(gahp, text)
        assert blah_id.endswith("/" + native_id)
        assert len(fake.submitted) == 1

    run(main())


def test_find_by_client_job_id(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        gahp = make_gahp(tmp_path)
        blah_id = await submit(gahp, ad(tmp_path, ClientJobId="sched#3.0#1"))
        assert await gahp.find(call("F", "fake", "sched#3.0#1")) == ("0", "No error", blah_id)
        assert await gahp.find(call("F", "FAKE", "nobody")) == ("0", "No error", "NULL")
        fake.finish(blah_id.rsplit("/", 1)[1])
        # Finished jobs are found too: the submission reached the batch system.
        assert (await gahp.find(call("F", "fake", "sched#3.0#1")))[2] == blah_id
        # Submitted, then a crash before the id was written down: the back end knows.
        request = parse_submit_ad(ad(tmp_path, ClientJobId="4.0"), default_iwd="/", new_tag="x")
        spec, _ = gahp.store.stage_in(request)
        native_id = await fake.submit(spec)
        found = await gahp.find(call("F", "fake", "4.0"))
        assert found[:2] == ("0", "No error") and found[2].endswith("/" + native_id)
        assert gahp.store.latest("4.0") is not None
        assert gahp.store.latest("4.0").native_id == native_id  # type: ignore[union-attr]
        unknown = await gahp.find(call("F", "nqs", "4.0"))
        assert unknown[0] == "1" and unknown[2] == "NULL"

    run(main())


def test_tags_that_are_not_directory_names() -> None:
    from htgrid.backends.batch._jobad import client_tag

    assert client_tag("..") == "job.."
    assert client_tag("a/b c") == "a_b_c"
    assert client_tag("x" * 300) == "x" * 200


# ---- status batching --------------------------------------------------------------------------


def test_one_backend_query_answers_a_window_of_requests(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        ids = [await submit(gahp, ad(tmp_path)) for _ in range(3)]
        asks = [*ids * 30, "fake/20270115/404"]
        tasks = [asyncio.create_task(gahp.status(call("BLAH_JOB_STATUS", i))) for i in asks]
        await sleeping(clock)
        await asyncio.sleep(0.05)  # the stragglers' file lookups, in threads
        assert fake.queries == []
        await clock.advance(0.5)
        results = await asyncio.gather(*tasks)
        assert len(fake.queries) == 1
        assert sorted(fake.queries[0]) == sorted([i.rsplit("/", 1)[1] for i in ids] + ["404"])
        assert all(r[:3] == ("0", "No error", "1") for r in results[:-1])
        assert results[-1] == ("1", "Job fake/20270115/404 not found", "0", "N/A")
        # Within max_age: answered from the last query.
        await clock.advance(10)
        await asyncio.gather(*(gahp.status(call("S", i)) for i in ids))
        assert len(fake.queries) == 1
        # Later, one query again covers every live job, even the ones not asked yet.
        await clock.advance(15)
        assert (await status(gahp, clock, ids[0]))[2] == "1"
        assert len(fake.queries) == 2 and len(fake.queries[1]) == 3
        await asyncio.gather(*(gahp.status(call("S", i)) for i in ids[1:]))
        assert len(fake.queries) == 2

    run(main())


def test_an_unavailable_batch_system(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        blah_id = await submit(gahp, ad(tmp_path))
        fake.down = True
        result = await status(gahp, clock, blah_id)
        assert result == ("1", "squeue: cannot reach slurmctld", "0", "N/A")
        assert await gahp.ping(call("BLAH_PING", "fake")) == ("1", "squeue: cannot reach slurmctld")
        fake.down = False
        assert (await status(gahp, clock, blah_id))[:3] == ("0", "No error", "1")
        assert await gahp.ping(call("BLAH_PING", "FAKE")) == ("0", "No error")
        assert (await gahp.ping(call("BLAH_PING", "nqs")))[0] == "1"

    run(main())


def test_status_all(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        blah_id = await submit(gahp, ad(tmp_path))
        task = asyncio.create_task(
            gahp.status_all(call("BLAH_JOB_STATUS_ALL", blah_id, "fake/1/404", "junk"))
        )
        await sleeping(clock)
        await asyncio.sleep(0.05)
        await clock.advance(1)
        result = await task
        assert result[:3] == ("0", "No error", "3")
        live, missing, junk = (parsed(text) for text in result[3:])
        assert live["BlahJobId"] == blah_id and live["JobStatus"] == 1
        assert missing["JobStatus"] == 0 and "not found" in missing["BlahError"]
        assert junk["JobStatus"] == 0 and "Malformed" in junk["BlahError"]
        assert len(fake.queries) == 1

    run(main())


def test_a_poll_of_all_jobs_gets_the_batch_systems_state_now(
    tmp_path: Path, fake: FakeBackend
) -> None:
    # The grid manager polls every 10 s with BLAH_JOB_STATUS_ALL: an answer reused for
    # the 20 s a single BLAH_JOB_STATUS may reuse one would show it a job's end a poll late.
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        blah_id = await submit(gahp, ad(tmp_path))
        native_id = blah_id.rsplit("/", 1)[1]

        async def poll() -> int:
            task = asyncio.create_task(gahp.status_all(call("BLAH_JOB_STATUS_ALL", blah_id)))
            while not task.done() and not clock.sleepers:
                await asyncio.sleep(0.001)
            if not task.done():
                await clock.advance(0.5)
            result = await task
            assert result[:3] == ("0", "No error", "1")
            return int(parsed(result[3])["JobStatus"])

        assert await poll() == 1
        fake.jobs[native_id] = NativeStatus(native_id, JobState.RUNNING)
        await clock.advance(10)
        assert (await status(gahp, clock, blah_id))[2] == "1"  # one job: the kept answer
        assert len(fake.queries) == 1
        assert await poll() == 2  # the poll: a new query
        assert len(fake.queries) == 2
        assert await poll() == 2  # at once again (a poll's next chunk): the same query
        assert len(fake.queries) == 2

    run(main())


# ---- cancel, hold, resume --------------------------------------------------------------------


def test_job_commands(tmp_path: Path, fake: FakeBackend) -> None:
    async def main() -> None:
        clock = ManualClock()
        gahp = make_gahp(tmp_path, clock)
        blah_id = await submit(gahp, ad(tmp_path))
        native_id = blah_id.rsplit("/", 1)[1]
        assert await gahp.resume(call("R", blah_id)) == ("1", f"Job Idle jobId {blah_id}")
        assert await gahp.hold(call("H", blah_id)) == ("0", "No error")
        assert fake.jobs[native_id].state is JobState.HELD
        assert await gahp.hold(call("H", blah_id)) == ("0", f"Job Held jobId {blah_id}")
        assert await gahp.resume(call("R", blah_id)) == ("0", "No error")
        assert await gahp.cancel(call("C", blah_id)) == ("0", "No error")
        assert fake.jobs[native_id].state is JobState.REMOVED
        assert (await status(gahp, clock, blah_id))[2] == "3"
        assert await gahp.hold(call("H", blah_id)) == ("1", f"Job Removed jobId {blah_id}")
        assert await gahp.cancel(call("C", "junk")) == ("2", "Malformed jobId junk")
        assert (await gahp.cancel(call("C", "nqs/1/2")))[0] == "3"
        assert await gahp.hold(call("H", "fake/1/404")) == ("1", "Job not found jobId fake/1/404")
        no_proxy = await gahp.refresh_proxy(call("P", blah_id, "/tmp/x"))
        assert no_proxy[0] == "1"

    run(main())


# ---- the status ad ----------------------------------------------------------------------------


def test_status_ads() -> None:
    killed = NativeStatus(
        "77",
        JobState.COMPLETED,
        exit_signal=signal.SIGTERM,
        reason='walltime exceeded (limit "60" s)',
        wallclock_seconds=61.0,
    )
    job_status, text = status_ad(killed, None)
    assert job_status == 4
    attrs = parsed(text)
    assert attrs["BatchJobId"] == "77" and attrs["JobStatus"] == 4
    assert attrs["ExitBySignal"] is True and attrs["ExitSignal"] == signal.SIGTERM
    assert attrs["ExitReason"] == 'walltime exceeded (limit "60" s)'
    assert "ExitCode" not in attrs
    assert "\n" not in text


def test_walltime_through_the_fork_back_end(tmp_path: Path) -> None:
    async def main() -> None:
        options = BatchOptions(scratch=tmp_path / "scratch", status_window=0.01, status_max_age=0)
        gahp = BatchGahp(options)
        text = ad(tmp_path, gridtype="fork", Cmd="/bin/sleep", Arguments="30", BatchRuntime=1)
        text = text.replace("]", "; StageCmd = false ]")
        blah_id = await submit(gahp, text)
        for _ in range(300):
            result = await gahp.status(call("BLAH_JOB_STATUS", blah_id))
            if result[2] == "4":
                break
            await asyncio.sleep(0.02)
        attrs = parsed(result[3])
        assert attrs["ExitBySignal"] is True and attrs["ExitSignal"] == signal.SIGTERM
        assert "walltime exceeded" in attrs["ExitReason"]

    run(main())
