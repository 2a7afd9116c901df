"""How far a live run's first chart point is: every phase before it, each at this server's measured pace now.

A run's first point comes after (1) the SFT warm starts its cache lacks, step by step (in the live lab, as one
group with the other runs of their kind: `rl_core.runs.warm_start_builder`), (2) the success check of a warm start
it has just trained (`sft.sft_success_rate` samples 256 prompts; then its checkpoint is written and the reference
copied), and (3) its first turn in the live training loop (`rl_core.runs.run_loop`), which it takes in the turn
after the one under way. An announcement that counted the warm start alone was 0.42 to 0.80 of the real wait in a
class of twenty (bench/class_load.py): the check and the first turn, at a loaded server's pace, were the 4 to 11 s
it left out.
"""

from __future__ import annotations

# The success check after a warm start's last step, in that warm start's steps: 0.061 CPU-s against 0.020 for an
# SFT step of the tiny model on caesar (one thread, this project's 2-core machine), so it slows as the steps do.
CHECK_SFT_STEPS = 3.0
# A run joining the loop steps in the turn after the one under way: on average half a turn, then the turn that takes
# it in (`RunLoop.take_in_wall`), whose record is handed over as that turn's steps are.
UNDER_WAY_TURNS = 0.5
# SFT steps of a warm-start group before its own pace is trusted (rl_core.runs.warm_start_builder): from its first
# one or two the time left came to 0.5 to 1.1 times the wait (bench/class_load.py, 8 warm starts building at once).
PACED_AFTER = 5


def first_point_seconds(warm_start_steps: float, sft_step: float, turn: float, take_in: float | None = None) -> float:
    """Seconds until a run's first point: its warm starts' `warm_start_steps` still to train and their success
    check, at `sft_step` seconds a step, then half the loop's turn under way (`turn` seconds now) and the turn that
    takes it in (`take_in` seconds, `turn` before one was timed):
    (warm_start_steps + CHECK_SFT_STEPS) × sft_step + UNDER_WAY_TURNS × turn + take_in, the check left out when no
    warm start is trained (a cached one is loaded with its report)."""
    check = CHECK_SFT_STEPS if warm_start_steps > 0 else 0.0
    return (warm_start_steps + check) * sft_step + UNDER_WAY_TURNS * turn + (turn if take_in is None else take_in)
