"""How often a live page redraws its dashboard: every second while few pages are live, less often as a class fills
the server, so that the redraws of all its open pages together take at most a fixed part of one core.

Every page's redraws run in the server's one process, under the one interpreter lock that the training loop needs
too. A redraw costs tens of milliseconds of CPU (a fragment rerun's own machinery about 60 ms, then the charts
built as plotly figures and sent as JSON); twenty pages redrawn every second asked for more than the interpreter
can run, so the pages stopped redrawing and the loop stopped stepping (bench/class_load.py). Each page's redraw
cost is measured as it goes (the CPU time of the script thread that drew it, and RERUN_SECONDS for Streamlit's
own work on a rerun), and the pages refresh at the interval at which all of them together stay within
`REDRAW_SHARE`. Pages still waiting for their run's first point have a budget of their own: their redraws are
cheap (no chart), so a latecomer's first point still shows within a second or two of its step while twenty charted
pages redraw every 20 to 24 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable

REFRESH_SECONDS = 1.0  # the fastest refresh: a chart gains a point about once a turn of the training loop
# The part of one core the charted pages' redraws may take together, and as much again the waiting pages': the
# loop, in the same process, keeps the rest. With twenty pages at load 9 to 13 on 2 cores, a quarter (its costs
# measured otherwise) left the script threads most of a profile of the server; a tenth kept every normal run at
# 0.95 to 1.39 of its fair share, the pages redrawing every 20 to 24 s (bench/README.md, class_load.py).
REDRAW_SHARE = 0.1
# A page is live while its latest redraw is at most this many of its intervals old, and at least LIVE_SECONDS: a
# closed tab drops out. Not fewer seconds: on a saturated server a page's redraws come late, and a page dropped
# for that would shorten everyone's interval and saturate it further.
LIVE_INTERVALS = 3.0
LIVE_SECONDS = 30.0
# How much of a redraw's newest measurement a page's running cost takes (a new point or tab changes it).
COST_WEIGHT = 0.5
# CPU seconds a rerun of a fragment costs before it draws anything (Streamlit's own work: a script thread, the
# fragment's saved cursors copied): about 0.06 s in a server of twenty live pages, read in the script threads.
RERUN_SECONDS = 0.06
# The interval a page runs at is changed (by a full rerun of the page, itself a costly redraw) only when the one
# wanted differs by more than this factor, so that pages do not rerun whole at every change in the class.
RETUNE_FACTOR = 2.0


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
    """The server's live pages (by session), the measured cost of each one's redraw, whether it draws charts yet,
    and the interval each kind refreshes at. `clock` (seconds, monotonic) is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, share: float = REDRAW_SHARE):
        self._clock = clock
        self.share = share
        self._lock = threading.Lock()
        # page → (redrawn at, cost, its interval, whether it drew charts)
        self._pages: dict[Hashable, tuple[float, float, float, bool]] = {}

    def redrawn(self, page: Hashable, cpu_seconds: float, interval: float, charted: bool = True) -> None:
        """`page`, refreshing every `interval` seconds, has just redrawn at a cost of `cpu_seconds`; `charted`:
        its run has points (else it waits for its first)."""
        with self._lock:
            cost = self._pages[page][1] if page in self._pages and self._pages[page][3] == charted else cpu_seconds
            self._pages[page] = (self._clock(), cost + COST_WEIGHT * (cpu_seconds - cost), interval, charted)

    def forget(self, page: Hashable) -> None:
        """`page` no longer refreshes (its run ended)."""
        with self._lock:
            self._pages.pop(page, None)

    def live(self, charted: bool = True) -> dict[Hashable, float]:
        """The live pages of one kind (with charts, or waiting for a first point) and their redraw costs; a page
        not redrawn for LIVE_INTERVALS of its interval (and LIVE_SECONDS) is gone."""
        now = self._clock()
        with self._lock:
            for page in [p for p, (at, _, every, _) in self._pages.items() if now - at > live_for(every)]:
                del self._pages[page]
            return {page: cost for page, (_, cost, _, drew) in self._pages.items() if drew == charted}

    def interval(self, charted: bool = True) -> float:
        """The interval the live pages of one kind refresh at now (`refresh_seconds` of their costs). Pages with
        charts count each waiting page as one of them (the median charted cost) too: it will be one at its first
        point, and a class pressing Train together then finds its interval at once instead of in many retunes."""
        costs = list(self.live(charted).values())
        if charted and costs:
            waiting = len(self.live(charted=False))
            costs += [sorted(costs)[len(costs) // 2]] * waiting
        return refresh_seconds(costs, self.share)
