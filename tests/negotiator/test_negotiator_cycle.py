"""One negotiation cycle: autoclusters, ranking, slots consumed, what is not matched."""

from __future__ import annotations

from htgrid.classad import ClassAd
from htgrid.negotiator import NegotiatorConfig, negotiate
from htgrid.queue import JobId

from ._pool import ads, job, slot

NOW = 1_700_000_000.0


def test_jobs_alike_in_what_matching_reads_share_an_autocluster() -> None:
    jobs = [job(1, p) for p in range(50)]  # differ in ProcId and Arguments only
    jobs += [job(2, p, extra="RequestMemory = 2048") for p in range(10)]
    jobs += [job(3, p, owner="bob") for p in range(5)]  # same shape, another submitter
    # RequestDisk reaches DiskUsage: jobs differing there differ.
    jobs += [job(4, p, extra=f"RequestDisk = DiskUsage\nDiskUsage = {p % 2}") for p in range(4)]
    result = negotiate(jobs, [slot(f"slot{i}@a") for i in range(100)], now=NOW)
    assert result.autoclusters == 5
    assert len(result.matches) == 69
    assert result.machine_classes == 1  # a hundred identical slots are matched once


def test_a_machine_attribute_read_by_any_job_splits_slot_classes() -> None:
    slots = [slot(f"slot{i}@a", extra=f"Mips = {i % 3}") for i in range(9)]
    plain = negotiate([job(1, 0)], slots, config=NegotiatorConfig(), now=NOW)
    ranked = negotiate([job(1, 0, extra="Rank = TARGET.Mips")], slots, now=NOW)
    assert plain.machine_classes == 1
    assert ranked.machine_classes == 3
    assert ranked.matches[0].machine_ad["Mips"] == 2


def test_slots_sort_by_pre_job_rank_then_job_rank_then_post_job_rank() -> None:
    # The table of HTCondor's manual ("Negotiation"): five slots match a request for
    # three jobs; the schedd is given slot5, slot3 and slot2.
    values = {1: (100, 1, 10), 2: (100, 2, 20), 3: (100, 2, 30), 4: (0, 1, 40), 5: (200, 1, 50)}
    slots = [
        slot(f"slot{n}@a", extra=f"PreValue = {pre}\nJobRankValue = {rank}\nPostValue = {post}")
        for n, (pre, rank, post) in values.items()
    ]
    config = NegotiatorConfig(pre_job_rank="PreValue", post_job_rank="PostValue")
    jobs = [job(7, p, extra="Rank = TARGET.JobRankValue") for p in range(3)]
    result = negotiate(jobs, slots, config=config, now=NOW)
    assert [m.machine for m in result.matches] == ["slot5@a", "slot3@a", "slot2@a"]
    assert [str(m.job_id) for m in result.matches] == ["7.0", "7.1", "7.2"]


def test_the_default_ranks_prefer_the_smallest_slot_that_fits() -> None:
    slots = [slot("big@a", memory=16384), slot("small@a", memory=2048)]
    (match,) = negotiate([job(1, 0)], slots, now=NOW).matches
    assert match.machine == "small@a"  # NEGOTIATOR_PRE_JOB_RANK's "- Memory"


def test_a_static_slot_takes_one_job_and_the_rest_wait() -> None:
    result = negotiate([job(1, p) for p in range(5)], [slot("s1@a"), slot("s2@a")], now=NOW)
    assert [str(m.job_id) for m in result.matches] == ["1.0", "1.1"]
    assert [(str(r.job_id), r.reason) for r in result.rejections] == [
        ("1.2", "no match found"),
        ("1.3", "no match found"),
        ("1.4", "no match found"),
    ]


def test_job_priority_orders_jobs_within_a_submitter() -> None:
    jobs = [job(1, 0), job(1, 1, extra="JobPrio = 10"), job(2, 0, extra="JobPrio = 5")]
    (match,) = negotiate(jobs, [slot("only@a")], now=NOW).matches
    assert match.job_id == JobId(1, 1)


def test_claimed_slots_and_slots_refusing_the_job_are_not_offered() -> None:
    slots = [
        slot("claimed@a", extra='State = "Claimed"\nRemoteUser = "bob@example.com"'),
        slot("picky@a", extra='Requirements = TARGET.Owner == "bob"'),
        slot("free@a"),
    ]
    result = negotiate([job(1, 0), job(1, 1)], slots, now=NOW)
    assert [m.machine for m in result.matches] == ["free@a"]
    assert result.pool_weight == 3.0  # claimed slots still count in the pie


def test_a_partitionable_slot_is_carved_until_it_runs_out() -> None:
    (pslot,) = ads(
        """MyType = "Machine"
Name = "slot1@big"
PartitionableSlot = true
State = "Unclaimed"
OpSys = "LINUX"
Cpus = 8
Memory = 16384
Disk = 100000
Requirements = true
"""
    )
    jobs = [job(1, p, extra="RequestCpus = 2\nRequestMemory = 3000") for p in range(6)]
    result = negotiate(jobs, [pslot], now=NOW)
    assert len(result.matches) == 4  # 8 cores, 2 each
    assert {(m.request.cpus, m.request.memory) for m in result.matches if m.request} == {(2, 3000)}
    assert [m.machine_ad["Cpus"] for m in result.matches] == [8, 6, 4, 2]
    assert [m.weight for m in result.matches] == [2.0] * 4
    assert pslot["Cpus"] == 8  # the caller's ad is left as it was
    # Memory runs out first when jobs ask for more of it.
    hungry = [job(2, p, extra="RequestMemory = 6000") for p in range(4)]
    assert len(negotiate(hungry, [pslot], now=NOW).matches) == 2


def test_ads_without_ids_still_match() -> None:
    bare = ClassAd({"Owner": "carol", "Requirements": True})
    (match,) = negotiate([bare], [slot("s@a")], now=NOW).matches
    assert match.job_id == JobId(0, 0) and match.submitter == "carol"
