"""One Streamlit browser session without a browser: the websocket a page opens (`/_stcore/stream`), the BackMsgs
it sends and the ForwardMsgs it reads, with nothing rendered, so the server's work for a session costs the same
and the client's costs next to nothing.

It does what Streamlit 1.67's frontend does for the parts a lab page uses:
* the first rerun names the page by its URL path (`page_name`); later ones carry the page's script hash (from
  `new_session`, or `navigation` in an app with `st.navigation`), the query string the server last wrote
  (`page_info_changed`) and the browser's context;
* a click is a rerun whose widget states hold the button's element id with `trigger_value` set;
* `st.fragment(run_every=…)` is timed by the client: on `auto_rerun` it sends a rerun with that fragment id
  (`is_auto_rerun`) every interval, until `stop_auto_rerun` names the fragment or a full run of the page starts.
The browser also sends every widget's value with each rerun; this client sends only the clicked trigger. That
changes nothing on the server: a widget whose value a rerun leaves out keeps its value from the previous run
(Streamlit's SessionState reads it from its old state), which is what the browser sends for a knob nobody moved.

The elements on the page are kept by delta path, as the frontend keeps them: a full run's end drops those it did
not draw."""

from __future__ import annotations

import asyncio
import base64
import json
import time

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect

MAIN = 0  # delta_path[0] of the page's main block (Streamlit's RootContainer.MAIN)
OPEN_TIMEOUT_S = 60  # the first page also imports torch and transformers


def trace_length(values) -> int:
    """Points in a plotly trace's x as the figure's JSON holds them: a list, or a typed array (`dtype`, base64
    `bdata`), the form plotly gives numpy arrays."""
    if isinstance(values, dict):
        return len(base64.b64decode(values.get("bdata", ""))) // int(values["dtype"][1:]) if "dtype" in values else 0
    return len(values or ())


def has_training_points(spec: str) -> bool:
    """Whether a plotly chart drawn against the training step (x axis titled "step") has a trace with a point:
    the same test as tests/app_driver.py's HAS_CHART_POINTS makes in the browser's DOM."""
    figure = json.loads(spec)
    layout = figure.get("layout", {})
    if ((layout.get("xaxis") or {}).get("title") or {}).get("text") != "step":
        return False
    return any(trace_length(trace.get("x")) > 0 for trace in figure.get("data", ()))


def draws_a_point(message: ForwardMsg) -> bool:
    """Whether a ForwardMsg draws a training chart that has a point."""
    element = message.delta.new_element
    return (
        message.WhichOneof("type") == "delta"
        and element.WhichOneof("type") == "plotly_chart"
        and has_training_points(element.plotly_chart.spec)
    )


class ProtocolSession:
    """A session on one page of the app at `url` (http://host:port), opened with `await open()`."""

    def __init__(self, url: str, page: str, cookies: dict[str, str] | None = None):
        self.url, self.page = url, page
        self.cookies = cookies or {}  # what the browser sends with the websocket's request (the learner's)
        self.page_script_hash = ""
        self.query_string = ""
        self.elements: dict[tuple[int, ...], object] = {}  # delta path → the Element drawn there
        self.full_runs_finished = 0
        self.clicked_at: float | None = None  # monotonic time of the latest click
        self.first_point_at: float | None = None  # monotonic time of the first chart point after it
        self.redrawn_at: float | None = None  # monotonic time the click's own run of the page finished
        self.page_at_first_point: dict[tuple[int, ...], object] = {}  # `elements` when that point came
        self.alert_texts: list[str] = []  # the page's alerts each time one was drawn after the click, joined
        self.fragment_reruns_sent = 0  # since the click: the timer's reruns
        self.fragment_reruns_done = 0  # and those the server finished
        self.reruns_before_point = 0  # the timer's reruns sent from the click to the first point
        self._drawn: set[tuple[int, ...]] = set()  # paths drawn by the full run in progress
        self._timers: dict[str, tuple[float, asyncio.Task]] = {}  # fragment id → (interval, its timer)
        self._socket = None
        self._reader: asyncio.Task | None = None

    async def open(self) -> None:
        """Connect, ask for the page as a browser that opens its URL does, and wait until its first run is drawn."""
        ws_url = self.url.replace("http", "ws", 1) + "/_stcore/stream"
        # No keepalive pings: a busy server answers late, and the browser sends none either.
        cookie = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        self._socket = await connect(
            ws_url,
            subprotocols=["streamlit"],
            max_size=None,
            ping_interval=None,
            open_timeout=OPEN_TIMEOUT_S,
            additional_headers={"Cookie": cookie} if cookie else None,
        )
        self._reader = asyncio.create_task(self._read())
        await self._rerun(page_name=self.page)
        await self.wait_for(lambda: self.full_runs_finished > 0, OPEN_TIMEOUT_S, f"the {self.page} page to draw")

    async def close(self) -> None:
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._socket is not None:
            await self._socket.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    @property
    def waiting(self) -> bool:
        """Clicked and no chart point yet."""
        return self.clicked_at is not None and self.first_point_at is None

    def button(self, label: str):
        """The first button (in the page's order) of the main block with this label, or None."""
        found = [
            (path, element.button)
            for path, element in self.elements.items()
            if path[0] == MAIN and element.WhichOneof("type") == "button" and element.button.label == label
        ]
        return min(found, key=lambda item: item[0])[1] if found else None

    def alerts(self) -> str:
        """The text of every alert on the page, in the page's order."""
        return " ".join(
            element.alert.body for _, element in sorted(self.elements.items()) if element.WhichOneof("type") == "alert"
        )

    async def click(self, label: str, timeout: float = 5.0) -> bool:
        """Press the page's first button with this label once it is enabled; False if it is not within
        `timeout` seconds. The time of the click is `clicked_at`."""
        try:
            await self.wait_for(lambda: (b := self.button(label)) is not None and not b.disabled, timeout, label)
        except TimeoutError:
            return False
        self.clicked_at, self.first_point_at, self.redrawn_at, self.alert_texts = time.monotonic(), None, None, []
        self.fragment_reruns_sent = self.fragment_reruns_done = 0
        await self._rerun(widgets=[WidgetState(id=self.button(label).id, trigger_value=True)])
        return True

    async def wait_for(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            await asyncio.sleep(0.05)

    async def _rerun(self, widgets=(), page_name: str = "", fragment_id: str = "", auto: bool = False) -> None:
        message = BackMsg()
        state = message.rerun_script
        state.query_string = self.query_string
        state.widget_states.SetInParent()
        state.widget_states.widgets.extend(widgets)
        state.page_script_hash = self.page_script_hash
        state.page_name = page_name
        state.fragment_id = fragment_id
        state.is_auto_rerun = auto
        context = state.context_info
        context.timezone, context.timezone_offset, context.locale = "UTC", 0, "en-US"
        context.url = f"{self.url}/{self.page}" + (f"?{self.query_string}" if self.query_string else "")
        await self._socket.send(message.SerializeToString())

    async def _every(self, interval: float, fragment_id: str) -> None:
        """The fragment's timer: a rerun of it every `interval` seconds, on the clock (a browser's setInterval)."""
        due = time.monotonic()
        while True:
            due += interval
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await self._rerun(fragment_id=fragment_id, auto=True)
            self.fragment_reruns_sent += 1

    def _stop_timers(self, fragment_ids) -> None:
        for fragment_id in fragment_ids:
            if fragment_id in self._timers:
                self._timers.pop(fragment_id)[1].cancel()

    async def _read(self) -> None:
        async for data in self._socket:
            message = ForwardMsg()
            message.ParseFromString(data)
            self._handle(message, time.monotonic())

    def _handle(self, message: ForwardMsg, now: float) -> None:
        kind = message.WhichOneof("type")
        if kind == "new_session":
            self.page_script_hash = message.new_session.page_script_hash
            if not message.metadata.run.fragment_ids:  # a full run: the browser drops every fragment timer
                self._stop_timers(list(self._timers))
                self._drawn = set()
        elif kind == "navigation":  # an app with st.navigation: the page this run drew
            self.page_script_hash = message.navigation.page_script_hash
        elif kind == "page_info_changed":
            self.query_string = message.page_info_changed.query_string
        elif kind == "auto_rerun":
            rerun = message.auto_rerun
            if rerun.fragment_id and self._timers.get(rerun.fragment_id, (None,))[0] != rerun.interval:
                self._stop_timers([rerun.fragment_id])
                timer = asyncio.create_task(self._every(rerun.interval, rerun.fragment_id))
                self._timers[rerun.fragment_id] = (rerun.interval, timer)
        elif kind == "stop_auto_rerun":
            self._stop_timers(message.stop_auto_rerun.fragment_ids)
        elif kind == "script_finished":
            if message.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                self.elements = {path: e for path, e in self.elements.items() if path in self._drawn}
                self.full_runs_finished += 1
                if self.clicked_at is not None and self.redrawn_at is None:
                    self.redrawn_at = now
            elif message.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:
                self.fragment_reruns_done += 1
        elif kind == "delta":
            self._draw(message, now)

    def _draw(self, message: ForwardMsg, now: float) -> None:
        path, delta = tuple(message.metadata.delta_path), message.delta
        self._drawn.add(path)
        if delta.WhichOneof("type") != "new_element":
            self.elements.pop(path, None)  # a block (or a transient) took the element's place
            return
        self.elements[path] = delta.new_element
        if not self.waiting:
            return
        if draws_a_point(message):
            self.first_point_at, self.reruns_before_point = now, self.fragment_reruns_sent
            self.page_at_first_point = dict(self.elements)
        elif delta.new_element.WhichOneof("type") == "alert":
            self.alert_texts.append(self.alerts())
