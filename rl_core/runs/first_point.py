"""How far a live run's first chart point is: every phase before it, each at this server's measured pace now.

A run's first point comes after (1) the SFT warm starts its cache lacks, step by step (in the live lab, as one
group with the other runs of their kind: `rl_core.runs.warm_start_builder`), (2) the success check of a warm start
it has just trained (`sft.sft_success_rate` samples 256 prompts; then its checkpoint is written and the reference
copied), (3) its own preparation in the server (its models built, its warm start loaded from the cache, its
probe), and (4) its wait in the live training loop (`rl_core.runs.run_loop`) from joining to its first record. An
announcement that counted the warm start alone was 0.42 to 0.80 of the real wait in a class of twenty
(bench/class_load.py): the check and the first turn, at a loaded server's pace, were the 4 to 11 s it left out;
one that left out the preparation and counted the loop in turns told runs with a cached warm start 1–2 s for 3–6 s.
A run whose step costs more than the loop's turn steps in a lane of its own instead of (4), paced for the other
learners' shares (`rl_core.runs.run_loop.LanePacer`): its first record comes after its first step stretched by them.
"""

from __future__ import annotations

# The success check after a warm start's last step, in that warm start's steps: 0.061 CPU-s against 0.020 for an
# SFT step of the tiny model on caesar (one thread, this project's 2-core machine), so it slows as the steps do.
CHECK_SFT_STEPS = 3.0
# A run joining the loop before the loop has timed one: on average half the turn under way, then the turn that
# takes it in, each a turn as `RunLoop.turn_wall` times them.
UNDER_WAY_TURNS = 0.5
# A run's preparation before this server has timed one: a default GRPO run with its warm start cached, from its
# place in the loop to joining it, took 0.12 to 0.16 s beside twelve runs at load 5 (one process, no pages).
PREPARATION_SECONDS = 0.15
# SFT steps of a warm-start group before its own pace is trusted (rl_core.runs.warm_start_builder): from its first
# one or two the time left came to 0.5 to 1.1 times the wait (bench/class_load.py, 8 warm starts building at once).
PACED_AFTER = 5
# How far apart the paces of the earlier and the later half of a warm-start group's steps may be before its pace is
# trusted: a class's twenty pages loading beside its group's first steps made them slower than the rest, and a number
# read off them told 44-47 s for 27-29 s (bench/class_load.py). Halves within 1.25× of each other keep the whole's
# pace within about 1.12× of either.
STEADY_PACE = 1.25


def first_turn_seconds(turn: float, measured: float | None) -> float:
    """Seconds from a run's joining the loop to its first record: `measured` (the waits of the latest runs that
    joined with as much company or less, else the latest runs' own: `RunLoop.first_record_wall`), or before one
    was, the turn under way and the one that takes it in at `turn` seconds each: (UNDER_WAY_TURNS + 1) × turn."""
    return (UNDER_WAY_TURNS + 1) * turn if measured is None else measured


def lone_first_turn_seconds(turn: float, intake: float) -> float:
    """Seconds from a run's joining the loop alone (no other run preparing or joining with it) to its first record:
    the rest of the ordinary turn under way, of `turn` seconds (`RunLoop.turn_wall`), then the turn that takes it in,
    of `intake` seconds (`RunLoop.intake_wall`: it builds the group anew): UNDER_WAY_TURNS × turn + intake.

    Not the latest runs' own waits (`RunLoop.first_record_wall`): after a burst of runs joining at once those are
    the burst's last joiners', each behind the turns that took in the ones before it, and they rise with its size
    and the load it made. In one process (load 2-3 on 2 cores), twelve runs joining together left a median wait of
    0.87 s and a lone run then waited 0.62 s; after eight, 0.59 s against 0.76 s, where this sum came to 0.67 s;
    after twenty, 0.94 s against 1.12 s, where it came to 1.12 s."""
    return UNDER_WAY_TURNS * turn + intake


def lane_first_step_seconds(step_seconds: float, learners: int, cores: float = 1, slower: float = 1.0) -> float:
    """Seconds from a run's joining a lane of its own (`RunLoop._to_lane`) to its first record: its first step of
    `step_seconds` of CPU work, after each update of which the lane waits until its thread has used its learner's
    share of the loop's `cores` cores (`lane_pause`), cores/learners of a core; or, where the machine's load leaves
    the lane's thread less than that while it works (`slower` times as long as on an idle core: `contention`), it
    never waits: step_seconds × max(learners / cores, slower, 1), `learners` counting its own."""
    return step_seconds * max(learners / cores, slower, 1.0)


def first_point_seconds(warm_start_steps: float, sft_step: float, preparation: float, first_turn: float) -> float:
    """Seconds until a run's first point: its warm starts' `warm_start_steps` still to train and their success
    check at `sft_step` seconds a step, then its `preparation` and its `first_turn` (`first_turn_seconds`), each the
    seconds still ahead: (warm_start_steps + CHECK_SFT_STEPS) × sft_step + preparation + first_turn, the check left
    out when no warm start is trained (a cached one is loaded with its report)."""
    check = CHECK_SFT_STEPS if warm_start_steps > 0 else 0.0
    return (warm_start_steps + check) * sft_step + preparation + first_turn


def still_ahead(seconds: float, since: float | None, now: float) -> float:
    """What is left of a phase that takes `seconds` and began at `since` (None: not yet begun): seconds − (now −
    since), at least 0 (a phase that overran its measure is taken as about to end)."""
    return seconds if since is None else max(seconds - (now - since), 0.0)
