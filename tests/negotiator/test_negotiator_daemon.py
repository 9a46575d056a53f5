"""The negotiator daemon against in-memory fakes of the queue and the collector."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import httpx

from htgrid.classad import ClassAd
from htgrid.collector import AdStore, CollectorClient
from htgrid.collector.app import create_app
from htgrid.negotiator import CycleResult, NegotiatorConfig
from htgrid.negotiator.daemon import ROOM_ATTRIBUTES, CollectorMachines, Negotiator

from ._pool import ads, job, slot

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if len(self.slept) >= 3:
            raise asyncio.CancelledError


class Queue:
    """The queue daemon's side: idle jobs out, decisions in."""

    def __init__(self, jobs: list[ClassAd]) -> None:
        self.idle = {(j["ClusterId"], j["ProcId"]): j for j in jobs}
        self.running: list[ClassAd] = []
        self.reasons: dict[str, str] = {}

    async def idle_jobs(self) -> Sequence[ClassAd]:
        return list(self.idle.values())

    async def report(self, result: CycleResult) -> None:
        for match in result.matches:
            job = self.idle.pop((match.job_id.cluster, match.job_id.proc))
            self.running.append(match.job_ad(job))
        for rejection in result.rejections:
            self.reasons[str(rejection.job_id)] = rejection.reason


class Machines:
    def __init__(self, machine_ads: list[ClassAd]) -> None:
        self.ads = machine_ads

    async def machine_ads(self) -> Sequence[ClassAd]:
        return self.ads

    async def room_ads(self) -> Sequence[ClassAd]:
        return self.ads


def heard(ad: ClassAd, when: float, **attrs: object) -> ClassAd:
    ad = ad.__copy__()
    ad["LastHeardFrom"] = int(when)
    for key, value in attrs.items():
        ad[key] = value
    return ad


def test_matched_slots_are_not_offered_again_until_their_startd_reports() -> None:
    queue = Queue([job(1, p) for p in range(3)])
    machines = Machines([heard(slot(f"s{i}@a"), T0 - 60) for i in range(2)])
    clock = Clock()
    negotiator = Negotiator(queue, machines, clock=clock)

    async def main() -> None:
        first = await negotiator.cycle()
        assert len(first.matches) == 2
        clock.now += 60
        second = await negotiator.cycle()  # the ads have not changed yet: "Matched"
        assert second.matches == ()
        assert queue.reasons == {"1.2": "no match found"}
        # The startds report the claims; alice now has two slots in use.
        machines.ads = [
            heard(ad, clock.now, State="Claimed", RemoteUser="alice@example.com")
            for ad in machines.ads
        ]
        clock.now += 60
        await negotiator.cycle()
        alice = negotiator.priorities["alice@example.com"]
        assert alice.resources_in_use == 2.0
        assert alice.real > 0.5  # two slots for two minutes

    asyncio.run(main())
    assert [
        j["RemoteHost"] if "RemoteHost" in j else j["NumJobMatches"] for j in queue.running
    ] == [1, 1]


def test_a_partitionable_slots_ad_sent_before_its_claims_arrived_is_not_matched_again() -> None:
    # Under load the claims of a cycle's matches reach the node seconds later; an ad it
    # sent in between, heard after the matches, still shows their cores free. The match
    # counts against the slot until its claim was answered and the node heard from since.
    queue = Queue([job(1, p) for p in range(4)])
    big = heard(slot("slot1@a", cpus=2, memory=8192, extra="PartitionableSlot = true"), T0 - 5)
    machines = Machines([big])
    clock = Clock()
    negotiator = Negotiator(queue, machines, clock=clock, pending_lifetime=300)

    async def main() -> None:
        first = await negotiator.cycle()
        assert len(first.matches) == 2
        clock.now += 2
        machines.ads = [heard(big, clock.now)]  # sent before the claims came
        clock.now += 1
        negotiator.claim_answered(first.matches[0], True)
        negotiator.claim_answered(first.matches[1], True)
        clock.now += 1
        assert (await negotiator.cycle()).matches == ()  # both still counted
        machines.ads = [heard(big, clock.now, Cpus=0, Memory=6144)]  # the claims in it
        clock.now += 2
        assert (await negotiator.cycle()).matches == ()
        machines.ads = [heard(big, clock.now, Cpus=1, Memory=7168)]  # one released
        clock.now += 2
        assert len((await negotiator.cycle()).matches) == 1

    asyncio.run(main())


def test_a_refused_claim_leaves_the_slot_as_its_ad_says() -> None:
    queue = Queue([job(1, 0)])
    big = heard(slot("slot1@a", cpus=2, memory=8192, extra="PartitionableSlot = true"), T0 - 5)
    negotiator = Negotiator(queue, Machines([big]), clock=Clock(), pending_lifetime=300)

    async def main() -> None:
        (match,) = (await negotiator.cycle()).matches
        negotiator.claim_answered(match, False)
        queue.idle.update({(1, p): job(1, p) for p in (1, 2)})
        assert len((await negotiator.cycle()).matches) == 2  # both cores, at once

    asyncio.run(main())


def test_a_site_keeps_its_count_of_matches_between_its_updates() -> None:
    (site,) = ads(
        """MyType = "Machine"
Name = "SiteA"
resource_name = "batch slurm a"
Requirements = (CurMatches < 10) && (TARGET.JobUniverse == 9)
WantAdRevaluate = True
CurMatches = 1
"""
    )
    jobs = ads(
        "\n".join(
            f'ClusterId = 5\nProcId = {p}\nOwner = "a"\nJobUniverse = 9\n'
            'GridResource = "$$(resource_name)"\nRequirements = true\n'
            for p in range(12)
        )
    )
    queue = Queue(jobs)
    config = NegotiatorConfig(ignore_user_priorities=True)
    negotiator = Negotiator(queue, Machines([heard(site, T0 - 10)]), config=config, clock=Clock())

    async def main() -> None:
        assert len((await negotiator.cycle()).matches) == 9
        assert (await negotiator.cycle()).matches == ()  # the site has not said it took them

    asyncio.run(main())
    assert {j["GridResource"] for j in queue.running} == {"batch slurm a"}


def test_cycles_run_every_interval_and_advertise_to_the_collector() -> None:
    store = AdStore(clock=lambda: T0)
    for i in range(4):
        store.update("UPDATE_STARTD_AD", slot(f"s{i}@a"))
    queue = Queue([job(1, p) for p in range(3)])
    clock = Clock()

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(store))
        async with CollectorClient("collector.test", transport=transport) as client:
            negotiator = Negotiator(
                queue, CollectorMachines(client), clock=clock, interval=60, collector=client
            )
            with contextlib.suppress(asyncio.CancelledError):  # the clock stops it
                await negotiator.run()
            assert negotiator.cycles == 3

    asyncio.run(main())
    assert len(queue.running) == 3
    assert clock.slept == [60.0, 60.0, 60.0]
    (ad,) = store.query("Negotiator")
    assert ad["LastNegotiationCycleMatches0"] == 0  # the third cycle had nothing left
    assert ad["UpdateSequenceNumber"] == 3


def test_slot_ads_kept_between_cycles_are_matched_as_the_collector_has_them_now() -> None:
    # The negotiator keeps the collector's ads decoded between cycles: a slot's new
    # values count at the next cycle, a removed slot is not matched, an unchanged one
    # refreshed (LastHeardFrom) ends its pending match.
    now = [T0]
    store = AdStore(clock=lambda: now[0])
    store.update("UPDATE_STARTD_AD", slot("small@a", memory=512))
    store.update("UPDATE_STARTD_AD", slot("gone@b"))
    store.update("UPDATE_STARTD_AD", slot("kept@c", memory=512))
    queue = Queue([])
    clock = Clock()

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(store))
        async with CollectorClient("collector.test", transport=transport) as client:
            negotiator = Negotiator(queue, CollectorMachines(client), clock=clock)
            assert (await negotiator.cycle()).matches == ()  # the ads read, and kept
            query = ClassAd({"MyType": "Query", "TargetType": "Machine", "Name": "gone@b"})
            await client.invalidate("INVALIDATE_STARTD_ADS", query)
            store.update("UPDATE_STARTD_AD", slot("small@a", memory=4096))
            queue.idle.update({(1, p): job(1, p) for p in range(2)})
            (match,) = (await negotiator.cycle()).matches
            assert match.machine == "small@a" and match.machine_ad["Memory"] == 4096
            assert queue.reasons == {"1.1": "no match found"}
            # Claimed, then released, in updates that change nothing else: free again.
            clock.now += 5
            now[0] = clock.now
            store.update("UPDATE_STARTD_AD", slot("small@a", memory=4096))
            (again,) = (await negotiator.cycle()).matches
            assert again.machine == "small@a" and again.job_id.proc == 1

    asyncio.run(main())


def test_a_full_pools_cycles_read_of_its_slots_only_whether_they_have_room() -> None:
    # Between whole cycles a full pool's look asks the collector for ROOM_ATTRIBUTES
    # only: its claimed slots change with every job (Activity, JobId), and decoding
    # them whole each cycle cost the schedd's process, which the negotiator shares.
    # A slot freed shows in that look, and the cycle then reads and matches whole.
    now = [T0]
    store = AdStore(clock=lambda: now[0])
    store.update(
        "UPDATE_STARTD_AD", slot("p@a", cpus=0, memory=0, extra="PartitionableSlot = true")
    )
    busy = slot("p_1@a", extra='State = "Claimed"\nRemoteUser = "bob@example.com"')
    store.update("UPDATE_STARTD_AD", busy)
    queue = CountingQueue([job(1, 0)])
    clock = Clock()
    asked: list[str] = []

    async def counted(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/ads":
            asked.append(request.url.params.get("projection", ""))
        return await inner.handle_async_request(request)

    inner = httpx.ASGITransport(app=create_app(store))

    async def main() -> None:
        transport = httpx.MockTransport(counted)
        async with CollectorClient("collector.test", transport=transport) as client:
            negotiator = Negotiator(queue, CollectorMachines(client), clock=clock)
            await negotiator.cycle()  # whole: the job gets its reason
            assert queue.reads == 1 and asked == [""]
            for activity in ("Busy", "Idle", "Busy"):
                clock.now += 10
                now[0] = clock.now
                store.update("UPDATE_STARTD_AD", heard(busy, clock.now, Activity=activity))
                assert (await negotiator.cycle()).matches == ()
            assert queue.reads == 1 and len(asked) == 4
            assert all(set(p.split(",")) == set(ROOM_ATTRIBUTES) for p in asked[1:])
            clock.now += 10
            now[0] = clock.now
            store.update("UPDATE_STARTD_AD", slot("p_1@a"))  # released: room
            (match,) = (await negotiator.cycle()).matches
            assert match.machine == "p_1@a" and queue.reads == 2 and asked[-1] == ""

    asyncio.run(main())


class CountingQueue(Queue):
    def __init__(self, jobs: list[ClassAd]) -> None:
        super().__init__(jobs)
        self.reads = 0

    async def idle_jobs(self) -> Sequence[ClassAd]:
        self.reads += 1
        return await super().idle_jobs()


def test_a_pool_with_no_room_is_negotiated_whole_only_now_and_then() -> None:
    # The negotiator shares the schedd's process: a full pool's cycles read no job and
    # match nothing, but its idle jobs' reasons are renewed each minute; a slot with
    # room is negotiated at the next cycle.
    queue = CountingQueue([job(1, 0)])
    full = heard(slot("slot1@a", cpus=0, memory=0, extra="PartitionableSlot = true"), T0 - 5)
    claimed = heard(slot("slot1_1@a"), T0 - 5, State="Claimed", RemoteUser="bob@example.com")
    machines = Machines([full, claimed])
    clock = Clock()
    store = AdStore(clock=lambda: clock.now)

    async def main() -> None:
        transport = httpx.ASGITransport(app=create_app(store))
        async with CollectorClient("collector.test", transport=transport) as client:
            await cycles(Negotiator(queue, machines, clock=clock, collector=client))

    async def cycles(negotiator: Negotiator) -> None:
        await negotiator.cycle()  # the first cycle is whole: the job gets its reason
        assert queue.reads == 1 and queue.reasons == {"1.0": "no match found"}
        for _ in range(5):
            clock.now += 10
            assert (await negotiator.cycle()).matches == ()
        assert queue.reads == 1 and negotiator.cycles == 6
        # Its ad is kept fresh all the same (`htgrid status -negotiator`).
        (ad,) = store.query("Negotiator")
        assert ad["UpdateSequenceNumber"] == 6 and ad["LastNegotiationCycleNumIdleJobs0"] == 1
        clock.now += 10  # a minute since the whole cycle
        await negotiator.cycle()
        assert queue.reads == 2
        clock.now += 2
        machines.ads = [heard(slot("slot1@a", cpus=1, memory=4096), clock.now), claimed]
        matched = await negotiator.cycle()  # room: negotiated at once
        assert queue.reads == 3 and len(matched.matches) == 1

    asyncio.run(main())
