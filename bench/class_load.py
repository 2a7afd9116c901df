"""A class of twenty on one server, as a hostile classmate would try it: does a latecomer still train, does every
run keep its learner's share, and do the waits the pages announce hold?

Starts `streamlit run app.py` on 127.0.0.1 (default limits) and speaks Streamlit's protocol
(`bench/protocol_session.py`), each session a learner of its own:

1. alone: one session trains the default GRPO run for `--alone` seconds; its steps per second are the pace alone
   (its SFT warm start is cached from here on);
2. the class: `--learners` sessions open `/grpo?steps=2000&sft_steps=50&seed=K` (the server's maximum steps, a
   warm start of their own) and press Train within milliseconds, the last one the heavy link
   (`prompts_per_step=256&num_generations=4&ppo_epochs=64&num_minibatches=4&steps=40`); the bench waits until every
   normal run has its first chart point on its page (at most CLASS_TIMEOUT_S);
3. a latecomer presses Train on the default page: the seconds to its first point;
4. `--hold` seconds more: each run's steps, as a pace against the pace alone times the learners sharing the
   server (the fair share: 1.0 is exactly its share); each learner's part of the training time the run store
   recorded in that time (its steps' `step_time`), times the learners (1.0: exactly its share); each page's
   dashboard redraws per second and the refresh interval it announced (ui/refresh.py). Meanwhile a learner
   whose runs trained more than the hour's allowance (written into the run store) opens the page in their browser (their
   cookie), then with a `?me=` of their own invention: Train must stay disabled both times;
5. the queue, the class still training: the server's loop has `--queue` places beyond the class's (its
   RLHF_LAB_MAX_LIVE_RUNS), so `--queue` learners take them with runs of QUEUE_STEPS steps and `--queue` more press
   Train after them and queue until those end (`--queue 0` leaves this out);
6. the experiment panel, the class still training: a learner opens EXPERIMENT_PAGE, reads the wait its See it
   happen panel announces (its runs and the warm starts it trains first), presses Run and waits for the verdict
   (`--no-experiment` leaves this out);
7. the heavy run, which steps in a lane of its own paced for the class's shares: if it has no first point yet,
   `--heavy-wait` seconds more at most for it (its first point is a class's worth of its steps away: many minutes).

Announced waits: whenever a session's page says "about N s to its first point" (queued: "about N s to wait for
its first point") before its first point, the first such announcement is compared with the real seconds from then
to the point (the heavy run's apart too, with the seconds it had waited by the end if its point never came). A page
that says "under 3 s" instead (a wait too short for a number) made a bound: it holds within
1.5× if the point came within 4.5 s, and is counted apart, never as a ratio. Connection errors: every ForwardMsg that is
a reference to the browser's message cache (a `ref_hash`: what the browser can miss) and every session whose
socket closed before the end. The load average is read before and after.

Run from the repository root:
    python bench/class_load.py [--learners 20] [--alone 20] [--hold 60] [--queue 3] [--heavy-wait 0] [--json out]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from protocol_session import ProtocolSession  # noqa: E402
from sessions_latency import PAGE, load_average, progress, stop_protocol_runs  # noqa: E402

from app_driver import serve_app  # noqa: E402
from rl_core.algorithms import get_preset  # noqa: E402
from rl_core.config import RunConfig  # noqa: E402
from rl_core.runs.store import RunStore  # noqa: E402
from ui.session import COOKIE  # noqa: E402

HEAVY = "prompts_per_step=256&num_generations=4&ppo_epochs=64&num_minibatches=4&steps=40"
ANNOUNCED = re.compile(r"(about|under) (\d+) s (?:to wait for|to) its first point")
WITHIN = 1.5  # the issue's factor: an announced wait holds if it is within it of the real one
# The experiment panel's caption: its runs' time (a bound for a first run, "About" from earlier runs here), and the
# warm starts it trains first when the cache lacks them.
EXPERIMENT_RUNS = re.compile(r"(?:up to about|About) (\d+) (s|min) for \d+ runs")
EXPERIMENT_WARM = re.compile(r"Before them, about (\d+) (s|min) to train the SFT warm starts")
EXPERIMENT_PAGE = "policy_gradient"  # its one experiment, pg_baseline: 16 runs of 40 steps, the cheapest caesar one
EXPERIMENT_TIMEOUT_S = 900
REDRAW_EVERY = re.compile(r"The charts redraw every ([\d.]+) s")
FIRST_POINT_TIMEOUT_S = 300
CLASS_TIMEOUT_S = 180  # for the whole class's first points: the latecomer presses Train by then in any case
# The server's allowance per learner and hour (RLHF_LAB_LEARNER_SECONDS_PER_HOUR): more than any run of the bench
# trains; the learner whose hour is spent trained SPENT_S of the past hour, more than it.
ALLOWANCE_S = 1800
SPENT_S = 3000
QUEUE_STEPS = 5  # the queue phase's runs: a few turns each at a class's share, so the queue moves within the bench
QUEUE_TIMEOUT_S = 300


class Learner(ProtocolSession):
    """A protocol session that also notes the first wait its page announced before its first point, and the
    references to the browser's message cache it was sent."""

    def __init__(self, url: str, page: str, query: str = "", cookies: dict[str, str] | None = None):
        super().__init__(url, page, cookies)
        self.query_string = query
        self.announced: tuple[float, float, str] | None = None  # (when, seconds announced, its text)
        self.cache_references = 0
        self.redraw_every: float | None = None  # the refresh interval the page announced last, if above 1 s

    def _handle(self, message, now: float) -> None:
        if message.WhichOneof("type") == "ref_hash":
            self.cache_references += 1
        super()._handle(message, now)

    def _draw(self, message, now: float) -> None:
        super()._draw(message, now)
        if message.delta.new_element.WhichOneof("type") == "markdown":
            found = REDRAW_EVERY.search(message.delta.new_element.markdown.body)
            if found:
                self.redraw_every = float(found.group(1))
        if not self.waiting or self.announced is not None or message.delta.WhichOneof("type") != "new_element":
            return
        element = message.delta.new_element
        text = {"alert": lambda: element.alert.body, "progress": lambda: element.progress.text}.get(
            element.WhichOneof("type"), lambda: ""
        )()
        found = ANNOUNCED.search(text)
        if found:
            self.announced = (now, float(found.group(2)), text)

    @property
    def steps(self) -> int | None:
        found = progress(self.elements)
        return None if found is None else found[0]

    def announced_against_real(self) -> dict | None:
        if self.announced is None or self.first_point_at is None:
            return None
        when, seconds, text = self.announced
        real = self.first_point_at - when
        bound = ANNOUNCED.search(text).group(1) == "under"
        return {
            "announced_s": seconds,
            "real_s": real,
            "bound": bound,  # "under N s": no ratio; it holds if the point came within WITHIN × N
            "ratio": None if bound or real <= 0 else seconds / real,
            "held": real <= WITHIN * seconds if bound else real > 0 and 1 / WITHIN <= seconds / real <= WITHIN,
            "text": text[:160],
        }


async def first_points(learners: list[Learner], timeout: float) -> list[float | None]:
    """Seconds from each session's click to its first chart point, waiting at most `timeout` seconds for all of
    them (None: no point by then)."""
    with contextlib.suppress(TimeoutError):
        await learners[0].wait_for(lambda: all(s.first_point_at is not None for s in learners), timeout, "points")
    return [None if s.first_point_at is None else s.first_point_at - s.clicked_at for s in learners]


async def pace(learners: list[Learner], seconds: float) -> list[float | None]:
    """Steps per second of each session's run over the next `seconds`."""
    before = [s.steps for s in learners]
    await asyncio.sleep(seconds)
    return [None if a is None or b is None else (b - a) / seconds for a, b in zip(before, [s.steps for s in learners])]


def training_seconds(db: Path) -> dict[int, float]:
    """Each active run's seconds of training so far (the sum of its steps' `step_time`: a group's step shared
    evenly among its runs), read from the server's run store."""
    store = RunStore(db, recover=False)
    return {run.id: sum(r.get("step_time", 0.0) for r in store.steps(run.id)) for run in store.runs() if run.active}


def spent_learner(db: Path) -> str:
    """A learner the server issued whose runs trained SPENT_S of the past hour (written into its run store): their
    token, as their browser's cookie holds it."""
    token = secrets.token_urlsafe(18)
    store = RunStore(db, recover=False)
    store.issue_identity(token, "", 1_000, 0.0)
    run_id = store.add_run(RunConfig(algo=get_preset("grpo"), task="caesar", steps=1), "an hour", session=token)
    store.finish_run(run_id, "finished")
    now = time.time()
    with sqlite3.connect(db) as db_file:
        db_file.execute("UPDATE runs SET started_at = ?, finished_at = ? WHERE id = ?", (now - SPENT_S, now, run_id))
    return token


async def refused_learner(url: str, db: Path) -> dict:
    """The learner whose hour is spent opens the page in their browser (their cookie), then with a `?me=` of
    their own invention: may they press Train either time?"""
    cookies = {COOKIE: spent_learner(db)}
    tries = {"own page": Learner(url, PAGE, cookies=cookies)}
    tries["with an invented ?me="] = Learner(url, PAGE, f"me={secrets.token_urlsafe(18)}", cookies)
    found = {}
    for name, session in tries.items():
        try:
            await session.open()
        except TimeoutError as error:  # a page that does not draw is a result too
            found[name] = {"train_enabled": None, "alerts": str(error)}
            continue
        finally:
            await session.close()
        train = session.button("Train")
        found[name] = {"train_enabled": train is not None and not train.disabled, "alerts": session.alerts()[:200]}
    return found


def seconds_in(found: re.Match | None) -> float:
    return 0.0 if found is None else float(found.group(1)) * (60 if found.group(2) == "min" else 1)


async def experiment_wait(url: str) -> dict:
    """A learner opens EXPERIMENT_PAGE on the loaded server, reads what its See it happen panel announces, presses
    the experiment's Run and waits for its verdict (an alert "… comparing … with …"): announced against real."""
    session = Learner(url, EXPERIMENT_PAGE)
    try:
        await session.open()
        captions = " ".join(
            e.markdown.body for _, e in sorted(session.elements.items()) if e.WhichOneof("type") == "markdown"
        )
        runs, warm = EXPERIMENT_RUNS.search(captions), EXPERIMENT_WARM.search(captions)
        announced = seconds_in(runs) + seconds_in(warm)
        if not await session.click("Run"):
            return {"announced_s": announced, "real_s": None, "text": "Run was not enabled"}
        try:
            await session.wait_for(lambda: "comparing " in session.alerts(), EXPERIMENT_TIMEOUT_S, "a verdict")
            real = time.monotonic() - session.clicked_at
        except TimeoutError:
            real = None
        return {
            "announced_s": announced,
            "real_s": real,
            "ratio": announced / real if real else None,
            "text": " ".join(m.group(0) for m in (runs, warm) if m),
            "load_average": load_average(),
        }
    finally:
        await session.close()


async def queue_waits(url: str, places: int) -> list[Learner]:
    """`places` learners take the loop's last places with runs of QUEUE_STEPS steps, then `places` more press Train
    and queue behind them; each waits for its first point (at most QUEUE_TIMEOUT_S). The sessions, still open."""
    ahead = [Learner(url, PAGE, f"steps={QUEUE_STEPS}&seed=0") for _ in range(places)]
    queued = [Learner(url, PAGE, f"steps={QUEUE_STEPS}&seed=0") for _ in range(places)]
    await asyncio.gather(*(s.open() for s in ahead + queued))
    for session in ahead + queued:
        if not await session.click("Train"):
            raise RuntimeError("Train is not enabled for a learner of the queue phase")
    await first_points(ahead + queued, QUEUE_TIMEOUT_S)
    return ahead + queued


def announced_so_far(session: Learner) -> dict | None:
    """The first wait a session's page announced against the real one (`Learner.announced_against_real`); before
    its first point, the seconds it has waited since the announcement (`waited_s`): the real wait is longer."""
    if session.announced is None or session.first_point_at is not None:
        return session.announced_against_real()
    when, seconds, text = session.announced
    return {"announced_s": seconds, "real_s": None, "waited_s": time.monotonic() - when, "text": text[:160]}


async def class_load(
    url: str, db: Path, learners: int, alone_s: float, hold_s: float, experiment: bool, queue: int, heavy_wait: float
) -> dict:
    solo = Learner(url, PAGE, "steps=2000")
    await solo.open()
    await solo.click("Train")
    if (await first_points([solo], FIRST_POINT_TIMEOUT_S))[0] is None:
        raise RuntimeError("the run alone drew no point")
    alone = (await pace([solo], alone_s))[0]
    await stop_protocol_runs([solo])
    await solo.close()

    queries = [f"steps=2000&sft_steps=50&seed={k}" for k in range(learners - 1)] + [HEAVY]
    cls = [Learner(url, PAGE, query) for query in queries]
    late = Learner(url, PAGE)
    everyone = [*cls, late]
    in_queue: list[Learner] = []
    try:
        await asyncio.gather(*(s.open() for s in everyone))
        started = time.monotonic()
        for session in cls:
            if not await session.click("Train"):
                raise RuntimeError(f"Train is not enabled for {session.query_string}")
        class_first = await first_points(cls[:-1], CLASS_TIMEOUT_S)
        await late.click("Train")
        await first_points([late], FIRST_POINT_TIMEOUT_S)
        seconds_before, redraws_before = training_seconds(db), [s.fragment_reruns_done for s in everyone]
        paces, refused = await asyncio.gather(pace(everyone, hold_s), refused_learner(url, db))
        seconds_after = training_seconds(db)
        load_in_hold = load_average()
        in_queue = await queue_waits(url, queue) if queue else []  # the class still training
        load_in_queue = load_average()
        panel = await experiment_wait(url) if experiment else None
        heavy = cls[-1]
        if heavy_wait > 0 and heavy.first_point_at is None:
            with contextlib.suppress(TimeoutError):
                await heavy.wait_for(lambda: heavy.first_point_at is not None, heavy_wait, "the heavy run's point")
        spent = {run: seconds_after[run] - seconds_before.get(run, 0.0) for run in seconds_after}
        sharing = len(everyone)  # learners with a run: each one's fair share is 1/sharing of the server
        shares = [None if p is None or not alone else p * sharing / alone for p in paces]
        return {
            "training_seconds_in_hold": spent,  # by run: one run per learner
            # each learner's part of the training time in the hold × learners (1.0: exactly its share)
            "held_share": [v * sharing / sum(spent.values()) for v in spent.values()] if sum(spent.values()) else [],
            "redraws_per_s": [(s.fragment_reruns_done - b) / hold_s for s, b in zip(everyone, redraws_before)],
            "redraw_every_announced": [s.redraw_every for s in everyone],
            "sockets_closed": sum(s._reader is not None and s._reader.done() for s in everyone),
            "refused_learner": refused,
            "learners_sharing": sharing,
            "alone_steps_per_s": alone,
            "class_first_point_s": class_first,
            "class_ready_s": time.monotonic() - started,
            "heavy_first_point_s": None if heavy.first_point_at is None else heavy.first_point_at - heavy.clicked_at,
            "heavy_announced": announced_so_far(heavy),  # its lane's first step, announced against real
            "latecomer_first_point_s": None if late.first_point_at is None else late.first_point_at - late.clicked_at,
            "steps_per_s": paces,
            "share_of_fair": shares,  # 1.0: exactly 1/sharing of its pace alone
            "announced_waits": [a for s in everyone + in_queue if (a := s.announced_against_real()) is not None],
            "load_average_in_hold": load_in_hold,
            "load_average_after_queue": load_in_queue,
            "queue_first_point_s": [
                None if s.first_point_at is None else s.first_point_at - s.clicked_at for s in in_queue
            ],
            "experiment_panel": panel,
            "cache_references": sum(s.cache_references for s in everyone),
            "last_alerts": {s.query_string or "latecomer": s.alerts()[:200] for s in (cls[0], cls[-1], late)},
        }
    finally:  # the runs go on until the server stops with the bench: a Stop in 21 busy pages took minutes
        await asyncio.gather(*(s.close() for s in everyone + in_queue), return_exceptions=True)


def shown(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=20)
    parser.add_argument("--alone", type=float, default=20.0, help="seconds the pace alone is measured over")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds the class's paces are measured over")
    parser.add_argument(
        "--queue", type=int, default=3, help="places beyond the class's in the loop, and as many runs queued behind"
    )
    parser.add_argument(
        "--heavy-wait",
        type=float,
        default=0.0,
        help="seconds the bench waits at its end for the heavy run's first point, if it has none yet",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-experiment", action="store_true", help="leave out the experiment panel's announced and real wait"
    )
    args = parser.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="rlhf-lab-class-bench-"))
    env = {
        "RLHF_LAB_CACHE": str(cache),
        "RLHF_LAB_DB": str(cache / "runs.sqlite"),
        "RLHF_LAB_WARM_START": "0",
        "RLHF_LAB_LEARNER_SECONDS_PER_HOUR": str(ALLOWANCE_S),
        # the class and the latecomer, and the queue phase's first runs: the runs after them queue
        "RLHF_LAB_MAX_LIVE_RUNS": str(args.learners + 1 + args.queue),
    }
    results = {"cpus": os.cpu_count(), "load_average_before": load_average()}
    with serve_app(cache / "streamlit.log", env) as (url, _):
        results |= asyncio.run(
            class_load(
                url,
                cache / "runs.sqlite",
                args.learners,
                args.alone,
                args.hold,
                not args.no_experiment,
                args.queue,
                args.heavy_wait,
            )
        )
    results["load_average_after"] = load_average()
    normal = [s for s in results["share_of_fair"][:-2] if s is not None]
    waits = results["announced_waits"]
    print(
        f"{results['learners_sharing']} learners sharing {results['cpus']} cores; load average before "
        f"{results['load_average_before']}, after {results['load_average_after']}"
    )
    firsts = [t for t in results["class_first_point_s"] if t is not None]
    print(
        f"alone: {results['alone_steps_per_s']:.2f} steps/s; {len(firsts)} of {len(results['class_first_point_s'])} "
        f"normal runs drew a first point within {CLASS_TIMEOUT_S} s"
        + (f" (median {statistics.median(firsts):.1f} s, worst {max(firsts):.1f} s)" if firsts else "")
        + f"; the heavy run's after {shown(results['heavy_first_point_s'])} s"
    )
    print(f"latecomer's first point: {shown(results['latecomer_first_point_s'])} s")
    heavy = results["heavy_announced"]
    if heavy is None:
        print("the heavy run (a lane of its own): no wait announced")
    elif heavy["real_s"] is None:
        print(
            f"the heavy run (a lane of its own): announced {heavy['announced_s']:.0f} s, no point "
            f"{heavy['waited_s']:.0f} s later ({heavy['text']})"
        )
    else:
        print(
            f"the heavy run (a lane of its own): announced {heavy['announced_s']:.0f} s, real {heavy['real_s']:.0f} s, "
            f"announced ÷ real {shown(heavy['ratio'])} ({heavy['text']})"
        )
    if normal:
        print(
            f"normal runs' pace as a share of their fair share (1 = pace alone / {results['learners_sharing']}): "
            f"min {min(normal):.2f}, median {statistics.median(normal):.2f}, max {max(normal):.2f}; the heavy run "
            f"{shown(results['share_of_fair'][-2])}, the latecomer {shown(results['share_of_fair'][-1])}"
        )
    for kind, told in (
        ("first point", [w for w in waits if not w["text"].startswith("Queued")]),
        ("queue", [w for w in waits if w["text"].startswith("Queued")]),
    ):
        ratios = [w["ratio"] for w in told if w["ratio"]]
        bounds = [w for w in told if w["bound"]]
        print(
            f"announced waits ({kind}): {len(told)}, {sum(w['held'] for w in told)} within {WITHIN}×"
            + (
                f"; {len(ratios)} with a number, announced ÷ real min {min(ratios):.2f}, median "
                f"{statistics.median(ratios):.2f}, max {max(ratios):.2f}"
                if ratios
                else ""
            )
            + (
                f"; {len(bounds)} told under a bound, real "
                + ", ".join(f"{w['real_s']:.1f} s for under {w['announced_s']:.0f} s" for w in bounds)
                if bounds
                else ""
            )
        )
    panel = results["experiment_panel"]
    if panel is not None:
        print(
            f"experiment panel ({EXPERIMENT_PAGE}): announced {panel['announced_s']:.0f} s, verdict after "
            f"{shown(panel['real_s'])} s, announced ÷ real {shown(panel.get('ratio'))} ({panel['text']})"
        )
    print(
        f"load average at the end of the hold: {results['load_average_in_hold']}, after the queue phase: "
        f"{results['load_average_after_queue']}; the queue phase's first points (s, the queued ones last): "
        + ", ".join(shown(t) for t in results["queue_first_point_s"])
    )
    held = results["held_share"]
    if held:
        print(
            f"each learner's part of the training time in the hold × {results['learners_sharing']} learners: min "
            f"{min(held):.2f}, median {statistics.median(held):.2f}, max {max(held):.2f} (1 = exactly its share)"
        )
    redraws = results["redraws_per_s"]
    every = [e for e in results["redraw_every_announced"] if e is not None]
    print(
        f"dashboard redraws per session per second in the hold: min {min(redraws):.2f}, median "
        f"{statistics.median(redraws):.2f}, max {max(redraws):.2f}; the interval the pages announced: "
        + (f"{min(every):.1f}–{max(every):.1f} s" if every else "1 s (none announced)")
    )
    for name, tried in results["refused_learner"].items():
        print(f"the learner whose hour is spent, {name}: Train enabled {tried['train_enabled']}")
    print(f"references to the browser's message cache sent: {results['cache_references']}")
    print(f"sessions whose socket closed: {results['sockets_closed']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
