"""How often a live page redraws its dashboard: every second while few pages are live, less often as a class fills
the server, so that the redraws of all its open pages together take at most a fixed part of one core.

Every page's redraws run in the server's one process, under the one interpreter lock that the training loop needs
too. A redraw of a training dashboard (its charts built as plotly figures and sent as JSON) costs tens of
milliseconds of CPU; twenty pages redrawn every second asked for more than the interpreter can run, so the pages
stopped redrawing and the loop stopped stepping. Each page's redraw cost is measured as it goes (the CPU time of
the script thread that drew it), and the interval every charted page refreshes at is the one at which all of
them together stay within `REDRAW_SHARE`. A page still waiting for its run's first point is cheap (no chart) and
keeps the one-second refresh, so the point shows as soon as it comes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable

REFRESH_SECONDS = 1.0  # the fastest refresh: a chart gains a point about once a turn of the training loop
# The part of one core the live pages' redraws may take together: the loop, in the same process, keeps the rest.
REDRAW_SHARE = 0.25
# A page is live while its latest redraw is at most this many of its intervals old, and at least LIVE_SECONDS: a
# closed tab drops out. Not fewer seconds: on a saturated server a page's redraws come late, and a page dropped
# for that would shorten everyone's interval and saturate it further.
LIVE_INTERVALS = 3.0
LIVE_SECONDS = 30.0
# How much of a redraw's newest measurement a page's running cost takes (a new point or tab changes it).
COST_WEIGHT = 0.5
# The interval a page runs at is changed (by a full rerun of the page) only when the one wanted differs by more
# than this factor, so that pages do not rerun whole at every small change in the class.
RETUNE_FACTOR = 1.5


def refresh_seconds(costs: Iterable[float], share: float = REDRAW_SHARE, floor: float = REFRESH_SECONDS) -> float:
    """The interval T at which pages whose redraws cost `costs` CPU seconds each, all redrawn every T seconds, use
    at most `share` of a core: they use Σ costs / T, so T = max(floor, Σ costs / share)."""
    return max(floor, sum(costs) / share)


def live_for(interval: float) -> float:
    """Seconds a page refreshing every `interval` seconds stays live without a redraw:
    max(LIVE_INTERVALS × interval, LIVE_SECONDS)."""
    return max(LIVE_INTERVALS * interval, LIVE_SECONDS)


def retune(running: float, wanted: float, factor: float = RETUNE_FACTOR) -> bool:
    """Whether a page refreshing every `running` seconds should change to `wanted`: when one is more than `factor`
    times the other."""
    return wanted > running * factor or running > wanted * factor


class LivePages:
    """The server's live pages (by session), the measured cost of each one's redraw, and the interval they
    refresh at. `clock` (seconds, monotonic) is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, share: float = REDRAW_SHARE):
        self._clock = clock
        self.share = share
        self._lock = threading.Lock()
        self._pages: dict[Hashable, tuple[float, float, float]] = {}  # page → (redrawn at, cost, its interval)

    def redrawn(self, page: Hashable, cpu_seconds: float, interval: float) -> None:
        """`page`, refreshing every `interval` seconds, has just redrawn at a cost of `cpu_seconds`."""
        with self._lock:
            cost = self._pages[page][1] if page in self._pages else cpu_seconds
            self._pages[page] = (self._clock(), cost + COST_WEIGHT * (cpu_seconds - cost), interval)

    def forget(self, page: Hashable) -> None:
        """`page` no longer refreshes (its run ended)."""
        with self._lock:
            self._pages.pop(page, None)

    def live(self) -> dict[Hashable, float]:
        """The live pages and their redraw costs; a page not redrawn for LIVE_INTERVALS of its interval (and
        LIVE_SECONDS) is gone."""
        now = self._clock()
        with self._lock:
            for page in [p for p, (at, _, every) in self._pages.items() if now - at > live_for(every)]:
                del self._pages[page]
            return {page: cost for page, (_, cost, _) in self._pages.items()}

    def interval(self) -> float:
        """The interval every charted live page refreshes at now (`refresh_seconds` of their costs)."""
        return refresh_seconds(self.live().values(), self.share)
