"""The ClassAd JSON codec (htgrid.classad.adjson), each way its users go, per ad.

    python bench/adjson_codec.py [--ads 1000] [--repeat 7]

N job ads of 40 attributes (bench/classad_bench.py's, with its Requirements expression),
as a schedd answers a query. Prints the best of --repeat runs, in microseconds per ad:

- encode: `ads_to_json` (printJson), warm (the ads written before: their lines are
  remembered) and cold (ads parsed afresh each run);
- the APIs' decode: `loads` + `net._wire.ad_from_json` (a request's checks included);
- the condor GAHP: `loads` + `ad_text` (status answers as ClassAd lines, no ClassAd
  built), and `dumps` of each decoded ad;
- the collector: `json_members` + its join (cold), and `decode_ads` of the array;
- the parser: `parseAds(..., ParserType.JSON)` of the array.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from classad_bench import job_ad_text  # bench/ is on sys.path when run as a script

from htgrid.classad import ClassAd, ParserType, adjson, parseAds, parseOne
from htgrid.collector._wire import decode_ads, encode_ad, join_ads
from htgrid.net._wire import ad_from_json


def fresh(n: int) -> list[ClassAd]:
    return [parseOne(job_ad_text(i), ParserType.Old) for i in range(n)]


def best(n: int, repeat: int, run: Callable[[Any], object], setup: Callable[[], Any]) -> float:
    """Microseconds per ad of the quickest of `repeat` runs (`setup` untimed)."""
    quickest = float("inf")
    for _ in range(repeat):
        arg = setup()
        start = time.perf_counter()
        run(arg)
        quickest = min(quickest, time.perf_counter() - start)
    return quickest / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ads", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n, repeat = args.ads, args.repeat
    ads = fresh(n)
    array = adjson.ads_to_json(ads)
    body = '{"jobs": ' + array + "}"
    same = lambda: None  # noqa: E731
    rows = {
        "encode, warm (ads_to_json)": best(n, repeat, lambda _: adjson.ads_to_json(ads), same),
        "encode, cold (ads_to_json)": best(n, repeat, adjson.ads_to_json, lambda: fresh(n)),
        "API decode (loads + ad_from_json)": best(
            n, repeat, lambda _: [ad_from_json(o) for o in adjson.loads(body)["jobs"]], same
        ),
        "GAHP status (loads + ad_text)": best(
            n, repeat, lambda _: [adjson.ad_text(o) for o in adjson.loads(body)["jobs"]], same
        ),
        "GAHP dumps": best(
            n, repeat, lambda objs: [adjson.dumps(o) for o in objs], lambda: adjson.loads(array)
        ),
        "collector encode, cold (json_members)": best(
            n,
            repeat,
            lambda some: join_ads(encode_ad(adjson.json_members(ad)) for ad in some),
            lambda: fresh(n),
        ),
        "collector decode_ads": best(n, repeat, lambda _: decode_ads(array), same),
        "parseAds JSON": best(n, repeat, lambda _: list(parseAds(array, ParserType.JSON)), same),
    }
    for name, micros in rows.items():
        print(f"{name:40s} {micros:8.1f} µs/ad")


if __name__ == "__main__":
    main()
