"""Why is my job not running: condor_q -better-analyze's report."""

from __future__ import annotations

from htgrid.negotiator.analyze import analyze, better_analyze

from ._pool import ads, job, slot

HUNGRY = job(
    12,
    0,
    extra="""DiskUsage = 1
RequestDisk = DiskUsage
RequestMemory = 20000
Requirements = (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && (TARGET.Disk >= RequestDisk) && (TARGET.Memory >= RequestMemory) && (TARGET.HasFileTransfer)""",
)


def pool() -> list:  # type: ignore[type-arg]
    return [
        slot(f"slot{i}@n{i}", memory=4096 * (1 + i % 4), extra="HasFileTransfer = true")
        for i in range(10)
    ]


def test_each_clause_is_counted_and_the_blocking_one_named() -> None:
    analysis = analyze(HUNGRY, pool())
    assert [(c.step, c.matched, c.text) for c in analysis.conditions] == [
        (0, 10, 'TARGET.Arch == "X86_64"'),
        (1, 10, 'TARGET.OpSys == "LINUX"'),
        (3, 10, "TARGET.Disk >= RequestDisk"),
        (5, 0, "TARGET.Memory >= RequestMemory"),
        (7, 10, "TARGET.HasFileTransfer"),
    ]
    relax = analysis.relax
    assert relax is not None and relax.step == 5
    assert relax.suggestion == "MODIFY TO 16384"  # the largest memory on offer
    assert relax.suggested_matches == 2 and relax.matched_without == 10
    assert analysis.rejected_by_job == 10 and analysis.available == 0


def test_the_report_reads_like_better_analyze() -> None:
    text = better_analyze(HUNGRY, pool())
    assert "The Requirements expression for job 12.000 reduces to these conditions:" in text
    assert "Job 12.000 defines the following attributes:\n\n    DiskUsage = 1\n" in text
    assert "    RequestDisk = DiskUsage\n    RequestMemory = 20000\n" in text
    lines = text.splitlines()
    start = lines.index("Step    Matched  Condition")
    assert lines[start + 2 : start + 7] == [
        '[0]          10  TARGET.Arch == "X86_64"',
        '[1]          10  TARGET.OpSys == "LINUX"',
        "[3]          10  TARGET.Disk >= RequestDisk",
        "[5]           0  TARGET.Memory >= RequestMemory",
        "[7]          10  TARGET.HasFileTransfer",
    ]
    assert "1   ( TARGET.Memory >= 20000 )        0                   MODIFY TO 16384" in lines
    assert "12.000:  Run analysis summary ignoring user priority.  Of 10 machines," in lines
    assert "     10 are rejected by your job's requirements" in lines
    assert lines[-1] == (
        "   Relax [5] TARGET.Memory >= RequestMemory: with modify to 16384, 2 would match"
    )


def test_the_pool_is_sorted_as_better_analyze_sorts_it() -> None:
    slots = [
        slot("mine@a", extra='State = "Claimed"\nRemoteUser = "alice@example.com"'),
        slot("theirs@a", extra='State = "Claimed"\nRemoteUser = "bob@example.com"'),
        slot("picky@a", extra='Requirements = TARGET.Owner == "bob"'),
        slot("small@a", memory=512),
        slot("free@a"),
    ]
    analysis = analyze(job(3, 0), slots)
    assert (
        analysis.rejected_by_job,
        analysis.rejected_by_machine,
        analysis.running_yours,
        analysis.serving_others,
        analysis.available,
    ) == (1, 1, 1, 1, 1)
    # It can run; still, letting the small slot in is one change away.
    relax = analysis.relax
    assert relax is not None and (relax.suggestion, relax.suggested_matches) == ("MODIFY TO 512", 5)
    assert "Relax" not in analysis.format()  # said only when nothing matches


def test_a_grid_job_against_sites_that_lack_what_it_needs() -> None:
    sites = ads(
        "\n".join(
            f'MyType = "Machine"\nName = "Site{n}"\nresource_name = "batch slurm {n}"\n'
            "Requirements = TARGET.JobUniverse == 9\n"
            for n in "ABC"
        )
    )
    (grid_job,) = ads(
        "ClusterId = 30\nProcId = 1\nJobUniverse = 9\n"
        'GridResource = "$$(resource_name)"\n'
        "Requirements = (TARGET.HaveBamboozle == true) && (TARGET.resource_name =!= undefined)\n"
    )
    analysis = analyze(grid_job, sites)
    assert [(c.matched, c.suggestion) for c in analysis.conditions] == [(0, "REMOVE"), (3, "")]
    assert "30.001:  Run analysis summary ignoring user priority.  Of 3 machines," in (
        analysis.format()
    )
