"""The live dashboards' refresh: a class of pages whose redraws would take more than their part of the server's
time refresh less often, by the measured cost of each one's redraw; a page that stops redrawing drops out."""

from pytest import approx

from ui.refresh import LivePages, live_for, refresh_seconds, retune


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_refresh_seconds_keeps_the_redraws_within_their_share():
    # Twenty pages at 0.05 s a redraw, every T s: 1.0 / T of a core; a quarter of a core at T = 4 s.
    assert refresh_seconds([0.05] * 20, share=0.25) == approx(4.0)
    # One page costs 0.05 / 1 s: within the share at the one-second floor.
    assert refresh_seconds([0.05], share=0.25) == 1.0
    assert refresh_seconds([], share=0.25) == 1.0


def test_retune_only_past_the_factor():
    assert not retune(1.0, 1.4)
    assert not retune(1.0, 1.9)
    assert retune(1.0, 2.1)
    assert retune(8.0, 3.0)
    assert not retune(8.0, 5.0)


def test_live_pages_measure_each_page_and_drop_the_silent_ones():
    clock = Clock()
    pages = LivePages(clock, share=0.25)
    pages.redrawn("a", 0.1, 1.0)
    pages.redrawn("b", 0.3, 1.0)
    assert pages.interval() == approx(1.6)  # (0.1 + 0.3) / 0.25
    pages.redrawn("a", 0.3, 1.0)  # a's cost moves halfway to its newest redraw: 0.2
    assert pages.live() == approx({"a": 0.2, "b": 0.3})
    assert pages.interval() == approx(2.0)
    clock.now += 25.0
    pages.redrawn("a", 0.2, 1.0)
    clock.now += 10.0  # b last redrew 35 s ago: more than 30 s, and 3 of its 1 s intervals: its tab has closed
    assert pages.live() == approx({"a": 0.2})
    assert pages.interval() == 1.0  # 0.2 / 0.25 = 0.8: the floor
    pages.forget("a")
    assert pages.live() == {}


def test_a_page_stays_live_for_three_of_its_intervals_and_at_least_30_s():
    # A saturated server redraws a page late: dropping it then would shorten every page's interval.
    assert live_for(1.0) == 30.0
    assert live_for(20.0) == 60.0
    clock = Clock()
    pages = LivePages(clock, share=0.25)
    pages.redrawn("slow", 0.5, 20.0)
    clock.now += 59.0
    assert pages.live() == {"slow": 0.5}
    clock.now += 2.0
    assert pages.live() == {}


def test_pages_waiting_for_a_first_point_have_a_budget_of_their_own():
    clock = Clock()
    pages = LivePages(clock, share=0.1)
    for k in range(19):
        pages.redrawn(f"class {k}", 0.15, 30.0)  # nineteen pages with charts: 2.85 s of redraws
    pages.redrawn("cheap", 0.1, 30.0)
    pages.redrawn("latecomer", 0.05, 1.0, charted=False)
    assert pages.interval(charted=False) == 1.0  # 0.05 / 0.1 = 0.5: the floor, so its first point shows at once
    assert pages.live(charted=False) == {"latecomer": 0.05}
    # The charted pages count the waiting one as one of them, at their median cost: (2.85 + 0.1 + 0.15) / 0.1.
    assert pages.interval() == approx(31.0)
    # Its first point: from then on it is a charted page, its cost measured afresh.
    pages.redrawn("latecomer", 0.25, 1.0, charted=True)
    assert pages.live(charted=False) == {}
    assert pages.live()["latecomer"] == 0.25
    assert pages.interval() == approx(32.0)
