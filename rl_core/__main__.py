import sys

from rl_core.cli import main

sys.exit(main())
