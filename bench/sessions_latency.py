"""Many learners pressing Train at once: the time from each click to that session's first chart point, and
whether a queued learner is told their place and an estimate of the wait.

Starts `streamlit run app.py` on 127.0.0.1 (default caps: the live runs share one loop of at most 12), trains the
default GRPO run once so its SFT warm start is cached (as it is after the first run of a class), then for each N
in `--sessions` opens N sessions on the GRPO page, presses Train in all of them within a fraction of a second, and
waits until every one has a chart point. A session that is queued is read for "you are number … in the queue" and
"… s to wait". Each round ends by pressing Stop in every session (a closed tab's training goes on), so the next
round starts on an idle server.

Two kinds of client (`--client`):
* `browser` (the default): each session is a Chromium context through Playwright, timed to the first point in its
  DOM. In a class each learner's browser runs on their own laptop; here N of them share the server's cores.
* `protocol`: each session is Streamlit's own websocket protocol spoken by `bench/protocol_session.py` (no
  rendering), timed to the first ForwardMsg that draws a training chart with a point. It measures the server a class
  shares, with the clicks within milliseconds of each other.
Both print the same line per round; the JSON has every session's time, the server process's CPU seconds from the
first click until the last session had its point, and the load average before and after.

Run from the repository root:  python bench/sessions_latency.py [--client protocol] [--sessions 1 3 6 10]
[--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app_latency import cpu_snapshot  # noqa: E402
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from protocol_session import ProtocolSession, draws_a_point  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from app_driver import (  # noqa: E402
    CHROMIUM,
    HAS_CHART_POINTS,
    LAUNCH_FLAGS,
    TRAINING_TIMEOUT_MS,
    open_page,
    press_train,
    serve_app,
    wait_for_chart_points,
)
from ui.lab import DEFAULT_STEPS  # noqa: E402

PAGE = "grpo"
HEADING = "GRPO, with DAPO and Dr. GRPO"
QUEUE_PLACE = "in the queue"
WAIT_ESTIMATE = "s to wait"
STOPPED = "Stopped after"


def round_of(browser, url: str, sessions: int, server_pid: int) -> dict:
    """N sessions press Train together; seconds from each click to its first chart point."""
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(sessions)]
    arrived: dict[int, float] = {}  # when each session's first chart point reached its browser, on its websocket

    def note_point(index: int, data) -> None:
        if index not in arrived and isinstance(data, bytes):
            message = ForwardMsg()
            message.ParseFromString(data)
            if draws_a_point(message):
                arrived[index] = time.monotonic()

    try:
        pages = [context.new_page() for context in contexts]
        for index, page in enumerate(pages):
            page.on("websocket", lambda socket, i=index: socket.on("framereceived", lambda data: note_point(i, data)))
            open_page(page, f"{url}/{PAGE}", HEADING)
        train = [
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True)
            for page in pages
        ]
        server_cpu = cpu_snapshot(server_pid)[0]
        clicked = []
        for button in train:  # as close together as one driver can click
            button.click()
            clicked.append(time.monotonic())
        latency: dict[int, float] = {}
        queued, told_place, told_estimate = set(), set(), set()
        seen: dict[int, str] = {}  # each session's latest alert text while it waited
        deadline = time.monotonic() + TRAINING_TIMEOUT_MS / 1000
        while len(latency) < sessions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sessions - len(latency)} sessions got no chart point")
            for index, page in enumerate(pages):
                if index in latency:
                    continue
                if page.evaluate(HAS_CHART_POINTS):
                    latency[index] = time.monotonic() - clicked[index]
                else:
                    alerts = page.locator('[data-testid="stAlert"]')
                    text = " ".join(alerts.nth(i).inner_text() for i in range(alerts.count()))
                    seen[index] = text or seen.get(index, "")
                    if "queued:" in text:
                        queued.add(index)
                        told_place |= {index} if QUEUE_PLACE in text else set()
                        told_estimate |= {index} if WAIT_ESTIMATE in text else set()
            time.sleep(0.05)
        record = round_record(
            [latency[i] for i in range(sessions)],
            clicked,
            [seen.get(i, "") for i in range(sessions)],
            queued,
            told_place,
            told_estimate,
            cpu_snapshot(server_pid)[0] - server_cpu,
            time.monotonic() - clicked[0],
        )
        # The rest of each wait is the browser's: from the frame's arrival until its page showed the point.
        return record | {
            "point_arrived_s": [arrived[i] - clicked[i] if i in arrived else None for i in range(sessions)]
        }
    finally:
        # A closed tab's training goes on (a reload must find it running), so each round stops its own runs: the
        # next round starts on an idle server.
        stop_trainings(pages)
        for context in contexts:
            context.close()


def round_record(
    times: list[float],
    clicked: list[float],
    last_alerts: list[str],
    queued: set,
    told_place: set,
    told_estimate: set,
    server_cpu_s: float,
    wait_s: float,
) -> dict:
    """One round's numbers, the same for both clients."""
    return {
        "sessions": len(times),
        "first_point_s": times,
        "median_s": statistics.median(times),
        "worst_s": max(times),
        "click_spread_s": clicked[-1] - clicked[0],
        "queued_sessions": len(queued),
        "told_their_place": len(told_place),
        "told_an_estimate": len(told_estimate),
        "last_alert_while_waiting": last_alerts,
        "server_cpu_s": server_cpu_s,  # from the first click until every session had its point
        "wait_s": wait_s,  # that window's wall seconds
    }


def stop_trainings(pages) -> None:
    """Press the lab's Stop (the first of the page's Stop buttons; the experiment panels have their own) where it is
    live, and wait until each stopped run says so."""
    stopped = []
    for page in pages:
        stop = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Stop", exact=True).first
        try:
            stop.click(timeout=5_000)
            stopped.append(page)
        except PlaywrightTimeout:
            pass  # Stop is not live: this run had trained all its steps
    for page in stopped:
        with contextlib.suppress(PlaywrightTimeout):  # it ended on its own between the click and the Stop
            page.get_by_text(STOPPED).first.wait_for(timeout=30_000)


async def protocol_round(url: str, sessions: int, server_pid: int, hold: float = 0) -> dict:
    """The same round as `round_of`, with each session spoken at the protocol level (bench/protocol_session.py);
    with `hold`, the runs go on training that many seconds after the last point before they are stopped."""
    clients = [ProtocolSession(url, PAGE) for _ in range(sessions)]
    try:
        await asyncio.gather(*(client.open() for client in clients))
        server_cpu = cpu_snapshot(server_pid)[0]
        for client in clients:  # each click is one websocket message: all N go out within milliseconds
            if not await client.click("Train"):
                raise RuntimeError("a session's Train button is not enabled")
        await clients[0].wait_for(
            lambda: all(c.first_point_at is not None for c in clients),
            TRAINING_TIMEOUT_MS / 1000,
            "every session's first chart point",
        )
        waited = max(c.first_point_at for c in clients) - clients[0].clicked_at
        server_cpu = cpu_snapshot(server_pid)[0] - server_cpu
        reruns = {
            "fragment_reruns_sent": [c.fragment_reruns_sent for c in clients],  # click → the round's last point
            "fragment_reruns_done": [c.fragment_reruns_done for c in clients],
            "fragment_reruns_before_point": [c.reruns_before_point for c in clients],
        }
        # The progress bar above the charts, drawn in the same run as the first point, says how many steps.
        totals = [(progress(c.page_at_first_point) or (None, None))[1] for c in clients]
        if any(total != DEFAULT_STEPS for total in totals):  # the knobs were lost on the way
            raise RuntimeError(f"runs of {totals} steps, not the page's {DEFAULT_STEPS}")
        told = [" ".join(text for text in c.alert_texts if "queued:" in text) for c in clients]  # while queued
        record = round_record(
            [c.first_point_at - c.clicked_at for c in clients],
            [c.clicked_at for c in clients],
            [next((text for text in reversed(c.alert_texts) if text), "") for c in clients],
            {i for i, text in enumerate(told) if text},
            {i for i, text in enumerate(told) if QUEUE_PLACE in text},
            {i for i, text in enumerate(told) if WAIT_ESTIMATE in text},
            server_cpu,
            waited,
        )
        # When the click's own run of the page had finished drawing, the step count of the runs, the timers' reruns.
        return (
            record
            | {"redrawn_s": [c.redrawn_at and c.redrawn_at - c.clicked_at for c in clients], "steps_total": totals[0]}
            | reruns
            | await held(clients, hold, server_pid)
        )
    finally:
        await stop_protocol_runs(clients)
        await asyncio.gather(*(client.close() for client in clients))


async def stop_protocol_runs(clients: list[ProtocolSession]) -> None:
    """`stop_trainings` for protocol sessions: the lab's first Stop, where it is live within 5 s, then its
    "Stopped after"."""
    stopped = [client for client in clients if await client.click("Stop")]
    for outcome in await asyncio.gather(
        *(client.wait_for(lambda c=client: STOPPED in c.alerts(), 30, STOPPED) for client in stopped),
        return_exceptions=True,
    ):
        if not isinstance(outcome, TimeoutError) and outcome is not None:
            raise outcome  # a timeout is a run that ended on its own between the click and the Stop


async def held(clients: list[ProtocolSession], hold: float, server_pid: int) -> dict:
    """The server under N training sessions for `hold` seconds: its CPU seconds (of them, its training thread's:
    the thread that spent the most), and per session the fragment reruns sent and finished and the steps its
    progress bar went forward by."""
    if not hold:
        return {}
    (cpu, threads), steps = cpu_snapshot(server_pid), [progress(c.elements) for c in clients]
    sent, done = [c.fragment_reruns_sent for c in clients], [c.fragment_reruns_done for c in clients]
    await asyncio.sleep(hold)
    cpu_after, threads_after = cpu_snapshot(server_pid)
    return {
        "hold": {
            "s": hold,
            "server_cpu_s": cpu_after - cpu,
            "training_thread_cpu_s": max(threads_after[t] - threads[t] for t in threads_after if t in threads),
            "fragment_reruns_sent": [c.fragment_reruns_sent - n for c, n in zip(clients, sent)],
            "fragment_reruns_done": [c.fragment_reruns_done - n for c, n in zip(clients, done)],
            # None where the bar was not up at both ends (the run was queued, or had ended)
            "steps": [
                (after := progress(c.elements)) and before and after[0] - before[0] for c, before in zip(clients, steps)
            ],
        }
    }


def progress(elements: dict) -> tuple[int, int] | None:
    """The run's steps done and its number of steps as a page's progress bar says ("step 3/50 · …"), or None
    where it shows none."""
    texts = [element.progress.text for element in elements.values() if element.WhichOneof("type") == "progress"]
    found = [re.match(r"step (\d+)/(\d+)", text) for text in texts]
    return next(((int(match.group(1)), int(match.group(2))) for match in found if match), None)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"


def browser_rounds(url: str, counts: list[int], server_pid: int):
    """The rounds with Chromium sessions, one at a time, after a warm-up run in one of them."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        try:
            warm = browser.new_page()
            open_page(warm, f"{url}/{PAGE}", HEADING)
            press_train(warm)
            wait_for_chart_points(warm)  # the SFT checkpoint is cached from here on
            stop_trainings([warm])
            warm.close()
            for n in counts:
                yield round_of(browser, url, n, server_pid)
        finally:
            browser.close()


def protocol_rounds(url: str, counts: list[int], server_pid: int, hold: float):
    """The rounds with protocol sessions, after a warm-up round of one (which caches the SFT checkpoint)."""
    asyncio.run(protocol_round(url, 1, server_pid))
    for n in counts:
        yield asyncio.run(protocol_round(url, n, server_pid, hold))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 3, 6, 10])
    parser.add_argument(
        "--client",
        choices=("browser", "protocol"),
        default="browser",
        help="browser: a Chromium context per session; protocol: Streamlit's websocket protocol, "
        "no rendering (the server alone)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="protocol client: let the runs train this many seconds after the last point, and "
        "report the server's CPU, its fragment reruns and the steps in that time",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.hold < 0 or (args.hold and args.client != "protocol"):
        parser.error("--hold is a number of seconds ≥ 0, and only for --client protocol")

    cache = Path(tempfile.mkdtemp(prefix="rlhf-lab-sessions-bench-"))
    env = {"RLHF_LAB_CACHE": str(cache), "RLHF_LAB_DB": str(cache / "runs.sqlite"), "RLHF_LAB_WARM_START": "0"}
    results = {"client": args.client, "cpus": os.cpu_count(), "load_average_before": load_average(), "rounds": []}
    with serve_app(cache / "streamlit.log", env) as (url, server):
        rounds = (
            browser_rounds(url, args.sessions, server.pid)
            if args.client == "browser"
            else protocol_rounds(url, args.sessions, server.pid, args.hold)
        )
        for outcome in rounds:
            results["rounds"].append(outcome)
            print(
                f"{outcome['sessions']:>2} sessions: first chart point median {outcome['median_s']:.1f} s, worst "
                f"{outcome['worst_s']:.1f} s; {outcome['queued_sessions']} queued, "
                f"{outcome['told_their_place']} told their place, {outcome['told_an_estimate']} an estimate "
                f"(clicks spread over {outcome['click_spread_s']:.1f} s)",
                flush=True,
            )
            arrived = [t for t in outcome.get("point_arrived_s", ()) if t is not None]
            extra = (
                f"; the point's frame reached the browser after median {statistics.median(arrived):.1f} s, worst "
                f"{max(arrived):.1f} s"
                if arrived
                else ""
            )
            extra += (
                f"; per session, fragment reruns sent {outcome['fragment_reruns_sent']} (before its point "
                f"{outcome['fragment_reruns_before_point']}), done {outcome['fragment_reruns_done']}"
                if "fragment_reruns_sent" in outcome
                else ""
            )
            print(
                f"    server CPU {outcome['server_cpu_s']:.1f} s in the {outcome['wait_s']:.1f} s until the last "
                f"point{extra}",
                flush=True,
            )
            if "hold" in outcome:
                hold = outcome["hold"]
                print(
                    f"    then {hold['s']:.0f} s of training: server CPU {hold['server_cpu_s']:.1f} s (its training "
                    f"thread {hold['training_thread_cpu_s']:.1f} s); per session, "
                    f"steps {hold['steps']}, fragment reruns sent {hold['fragment_reruns_sent']}, done "
                    f"{hold['fragment_reruns_done']}",
                    flush=True,
                )
    results["load_average_after"] = load_average()
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
