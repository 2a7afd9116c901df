"""A phase's company: the mean number of runs in it over one run's stay, worked out by hand."""

import pytest

from rl_core.runs.crowd import Crowd, crowd_seconds, mean_concurrency, per_run_seconds


def test_each_runs_mean_company_is_the_count_over_its_own_stay():
    """A in at 0 s, B and C at 1 s, B out at 3 s, A at 4 s, C at 5 s. The count: 1 on [0, 1], 3 on [1, 3], 2 on
    [3, 4], 1 on [4, 5]. B: 3 × 2 / 2 = 3. A: (1 + 6 + 2) / 4 = 2.25. C: (6 + 2 + 1) / 4 = 2.25."""
    crowd = Crowd()
    a = crowd.enter(0.0)
    b, c = crowd.enter(1.0), crowd.enter(1.0)
    assert crowd.count == 3
    assert crowd.leave(b, 3.0) == 3.0
    assert crowd.leave(a, 4.0) == 2.25
    assert crowd.leave(c, 5.0) == 2.25
    assert crowd.count == 0


def test_a_run_alone_or_for_an_instant_is_its_own_company():
    crowd = Crowd()
    entry = crowd.enter(10.0)
    assert crowd.leave(entry, 10.0) == 1.0  # no time in the phase: no crowd to divide by
    assert mean_concurrency(area=0.0, seconds=0.0) == 1.0
    assert mean_concurrency(area=7.0, seconds=2.0) == 3.5


def test_a_phase_per_run_and_back_at_another_company():
    """Eighteen runs preparing together for 9 s each: 0.5 s a run; three together then take 1.5 s."""
    per_run = per_run_seconds(9.0, 18)
    assert per_run == 0.5
    assert crowd_seconds(per_run, 3) == 1.5
    assert crowd_seconds(per_run, 0) == 0.5  # nobody counted yet: the run itself
    assert per_run_seconds(2.0, 0.5) == pytest.approx(2.0)
