"""The `rlhf-lab` command that `pip install` makes: `rlhf-lab run [streamlit args]` starts the app, every other
command is the engine's (`python -m rl_core`'s: train, sweep, experiment, export, parity, export-unipo, algos, tasks).

Nothing heavy is imported here: `sweep` and `experiment` start their fork server before the engine is imported."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

# The app's sources (app.py, app_pages/, ui/, .streamlit/) sit beside the package in a clone; an editable install
# (`pip install -e .`) runs them from there.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
USAGE = (
    "usage: rlhf-lab run [streamlit args] | rlhf-lab {train,sweep,experiment,export,parity,export-unipo,algos,tasks} …"
)


def engine(argv: Sequence[str], prog: str) -> int:
    """The engine's command line (`rl_core.cli`), its worker server started first where its runs need one."""
    from rl_core.runs.workers import start_worker_server, trains_in_local_workers

    if trains_in_local_workers(argv, os.environ):
        # Their runs train in worker processes forked from a fork server that imports the engine: started first, it
        # does so while this process imports it too, side by side on two cores, instead of after.
        start_worker_server()
    from rl_core.cli import main  # after the fork server has started

    return main(list(argv), prog=prog)


def run_app(streamlit_args: Sequence[str]) -> int:
    """`streamlit run app.py` from the sources' folder (where `.streamlit/config.toml` is read), bound to the loopback
    address unless the caller passes --server.address (later flags win), as `./lab.sh run` does."""
    app = SOURCE_ROOT / "app.py"
    if not app.is_file():
        print(
            f"error: rlhf-lab run needs the app's sources beside rl_core, and {SOURCE_ROOT} has no app.py; install "
            "the lab from a clone with `pip install -e .`",
            file=sys.stderr,
        )
        return 2
    os.chdir(SOURCE_ROOT)
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", "127.0.0.1", *streamlit_args]
    os.execv(sys.executable, command)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] == "run":
        return run_app(argv[1:])
    return engine(argv, prog="rlhf-lab")
