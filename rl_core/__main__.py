import sys

if sys.argv[1:2] in (["experiment"], ["sweep"]):
    # Their runs train in worker processes forked from a fork server that imports the engine: started first, it
    # does so while this process imports it too, side by side on two cores, instead of after.
    from rl_core.runs.workers import start_worker_server

    start_worker_server()

from rl_core.cli import main  # after the fork server has started

sys.exit(main())
