"""rl_core: a small, exact engine for RLHF policy optimisation on GPT-2-class policies.

From Python: `from rl_core import train, run_experiment` (rl_core.api). They are imported on first use, so that
`import rl_core` (the run store, the command line's fork server) does not load torch."""

__all__ = ["train", "run_experiment", "TrainedRun"]


def __getattr__(name: str):
    if name in __all__:
        from rl_core import api

        return getattr(api, name)
    raise AttributeError(f"module 'rl_core' has no attribute {name!r}")
