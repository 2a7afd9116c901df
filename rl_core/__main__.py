import sys

from rl_core.console import engine

sys.exit(engine(sys.argv[1:], prog="python -m rl_core"))
