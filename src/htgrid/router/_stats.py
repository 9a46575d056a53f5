"""A route's recent outcomes and the failure throttle they set (JobRoute's throttle in
JobRouter.cpp): a black-hole route, whose jobs fail faster than FailureRateThreshold a
second, gets fewer new jobs until its jobs succeed again."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from htgrid.router._routes import Route

__all__ = ["THROTTLE_INTERVAL", "RouteStats"]

log = logging.getLogger("htgrid.router")

#: Seconds over which route failures are counted (JobRouter.cpp's THROTTLE_UPDATE_INTERVAL).
THROTTLE_INTERVAL: Final = 600.0


@dataclass
class RouteStats:
    """A route's recent outcomes and its throttle (jobs per THROTTLE_INTERVAL; 0: none)."""

    began: float
    routed: int = 0
    failed: int = 0
    succeeded: int = 0
    throttle: float = 0.0

    def accepting(self) -> bool:
        return not (0 < self.throttle <= self.routed)

    def adjust(self, route: Route, now: float, current: int) -> None:
        """JobRoute::AdjustFailureThrottles, once per THROTTLE_INTERVAL."""
        delta = now - self.began
        if delta < THROTTLE_INTERVAL:
            return
        rate = self.failed / delta
        throttle = self.throttle
        if rate > route.failure_rate_threshold and self.failed:
            ratio = self.failed / (self.failed + current + self.succeeded)
            throttle = THROTTLE_INTERVAL * route.failure_rate_threshold / ratio
        else:
            accel = 3.0 * self.succeeded - 2.0 * self.failed
            if accel > 0:
                accel /= self.succeeded + self.failed
            accel += 2.0
            if accel > 1.0:
                throttle *= accel
            if throttle > THROTTLE_INTERVAL * route.failure_rate_threshold * 10000:
                throttle = 0.0
            if 0 < throttle < 1 and self.failed == 0:
                throttle = 1.0
        if abs(throttle - self.throttle) > 0.0001:
            log.warning("route %s: throttle now %s", route.name, _throttle_text(throttle))
        self.throttle = throttle
        self.began = now
        self.routed = self.failed = self.succeeded = 0


def _throttle_text(throttle: float) -> str:
    return "none" if throttle <= 0 else f"{throttle / THROTTLE_INTERVAL:g} jobs/sec"
