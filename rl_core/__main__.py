import os
import sys

from rl_core.runs.workers import start_worker_server, trains_in_local_workers

if trains_in_local_workers(sys.argv[1:], os.environ):
    # Their runs train in worker processes forked from a fork server that imports the engine: started first, it
    # does so while this process imports it too, side by side on two cores, instead of after.
    start_worker_server()

from rl_core.cli import main  # after the fork server has started

sys.exit(main())
