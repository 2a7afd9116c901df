"""The algorithm presets: one file per algorithm, each defining `PRESET`, an `AlgoConfig` with the spec's
defaults. Every module in this package is imported here, so a new algorithm is a new file."""

from __future__ import annotations

import importlib
import pkgutil

from rl_core.config import PREFERENCE_PRESETS, AlgoConfig, DPOConfig, RewardConfig

PRESETS: dict[str, AlgoConfig] = {}

for _module in pkgutil.iter_modules(__path__):
    _preset = importlib.import_module(f"{__name__}.{_module.name}").PRESET
    _preset.validate()
    PRESETS[_preset.name] = _preset

# The order of the walk-through, then anything added later.
WALKTHROUGH_ORDER = (
    "pg",
    "ppo",
    "grpo",
    "dapo",
    "dr_grpo",
    "gspo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "vapo",
    "cispo",
    "sapo",
    "dppo",
    "lite_ppo",
    "maxrl",
    "opd",
)
PRESETS = {name: PRESETS[name] for name in WALKTHROUGH_ORDER if name in PRESETS} | PRESETS
# Everything a run can train: the RL presets, then the kinds fitted to preference pairs (DPO, IPO, reward model).
RUN_ALGOS = (*PRESETS, *PREFERENCE_PRESETS)


def get_preset(name: str, /, **overrides) -> AlgoConfig:
    """The named preset with knobs overridden; ValueError names the allowed presets or the bad knob."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"algorithm {name!r} is unknown; allowed: {', '.join(PRESETS)}")
    return PRESETS[name].with_knobs(**overrides)


def get_run_algo(name: str, /, **overrides) -> AlgoConfig | DPOConfig | RewardConfig:
    """What a run trains: an RL preset (`get_preset`); `"dpo"` / `"ipo"`, offline preference optimisation on the
    task's preference pairs (a `DPOConfig`); or `"reward_model"`, the Bradley–Terry reward model fitted to them (a
    `RewardConfig`): run kinds of their own, not RL presets. ValueError names the allowed names or the bad knob."""
    if isinstance(name, str) and name in PREFERENCE_PRESETS:
        return PREFERENCE_PRESETS[name].with_knobs(**overrides)
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"algorithm {name!r} is unknown; allowed: {', '.join(RUN_ALGOS)}")
    return get_preset(name, **overrides)
