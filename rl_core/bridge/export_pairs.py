"""The runs fitted to preference pairs, carried to scale: DPO and IPO as TRL 1.16's `DPOConfig` (Python source) and
OpenRLHF 0.11's `train_dpo` command line, the reward model as TRL's `RewardConfig` and OpenRLHF's `train_rm`.

As in `export_frameworks`, every knob of the configuration produces at least one line: a field set, or a comment
saying why it does not map. Field and flag names are checked in the tests against the released packages (TRL builds
each config in its throwaway virtualenv; OpenRLHF's own parsers read the flags).
"""

from __future__ import annotations

import dataclasses

from rl_core.bridge.export_frameworks import DESCRIPTIVE, Line, Rule, Set, no, openrlhf_line, to, trl_line
from rl_core.config import DPOConfig, PairRunConfig, RewardConfig

PAIR_FRAMEWORKS = ("trl", "openrlhf")
HELD_OUT = "{framework} evaluates on a dataset of its own: split this fraction of the pairs off as {where}"
NO_SAMPLES = (
    "{framework} never samples the policy; the lab samples these prompts for the gold success and the KL it records"
)


def _trl_loss_type(k: dict, knob: str) -> Line:
    if k[knob] == "ipo":
        return Set("loss_type", ["ipo"], "IPO on per-token mean log-ratios, the lab's form too")
    return Set("loss_type", ["sigmoid"], "DPO's −log σ(β h) on summed log-probabilities")


def _openrlhf_loss_type(k: dict, knob: str) -> Line | list[Line]:
    if k[knob] != "ipo":
        return "OpenRLHF's DPO loss is the sigmoid one by default"
    return [
        Set("--model.ipo_enable", True),
        "OpenRLHF's IPO takes h from summed log-probabilities where the lab (as TRL) divides each response's by "
        "its token count: the same beta sets a target per response there and per token here",
    ]


def _trl_eval(k: dict, knob: str) -> list[Line]:
    return [Set("eval_strategy", "steps"), Set("eval_steps", k[knob], "on the held-out pairs (eval_dataset)")]


def _openrlhf_batch(k: dict, knob: str) -> list[Line]:
    return [
        Set("--train.batch_size", k[knob], "pairs per optimiser step"),
        Set("--train.micro_batch_size", k[knob], "one process, no accumulation"),
    ]


TRL_DPO_RULES: dict[str, Rule] = {
    "loss_type": _trl_loss_type,
    "beta": to("beta"),
    "learning_rate": to("learning_rate"),
    "per_device_train_batch_size": to(
        "per_device_train_batch_size", note="the lab draws them with replacement, TRL walks the shuffled dataset"
    ),
    "holdout_fraction": no(HELD_OUT.format(framework="TRL", where="eval_dataset")),
    "eval_steps": _trl_eval,
    "n_eval_prompts": no(NO_SAMPLES.format(framework="TRL's DPOTrainer")),
}
OPENRLHF_DPO_RULES: dict[str, Rule] = {
    "loss_type": _openrlhf_loss_type,
    "beta": to("--model.beta"),
    "learning_rate": to("--adam.lr"),
    "per_device_train_batch_size": _openrlhf_batch,
    "holdout_fraction": no(HELD_OUT.format(framework="OpenRLHF", where="--eval.dataset")),
    "eval_steps": to("--eval.steps"),
    "n_eval_prompts": no(NO_SAMPLES.format(framework="OpenRLHF's DPO trainer")),
}
TRL_REWARD_RULES: dict[str, Rule] = {
    "learning_rate": to("learning_rate"),
    "per_device_train_batch_size": to("per_device_train_batch_size"),
    "holdout_fraction": no(HELD_OUT.format(framework="TRL", where="eval_dataset")),
    "eval_steps": _trl_eval,
}
OPENRLHF_REWARD_RULES: dict[str, Rule] = {
    "learning_rate": to("--adam.lr"),
    "per_device_train_batch_size": _openrlhf_batch,
    "holdout_fraction": no(HELD_OUT.format(framework="OpenRLHF", where="--eval.dataset")),
    "eval_steps": to("--eval.steps"),
}
RULES = {
    (DPOConfig, "trl"): TRL_DPO_RULES,
    (DPOConfig, "openrlhf"): OPENRLHF_DPO_RULES,
    (RewardConfig, "trl"): TRL_REWARD_RULES,
    (RewardConfig, "openrlhf"): OPENRLHF_REWARD_RULES,
}

# The lab's optimiser, which no knob names: AdamW with torch's betas, no weight decay, a constant learning rate,
# gradients clipped at norm 1; DPO's policy without dropout.
TRL_ENGINE = (
    Set("gradient_accumulation_steps", 1, "one minibatch per optimiser step"),
    Set("lr_scheduler_type", "constant", "the lab's AdamW keeps its learning rate"),
    Set("weight_decay", 0.0, "the lab's AdamW has no weight decay"),
    Set("max_grad_norm", 1.0, "the lab clips the gradient norm at 1"),
)
TRL_KIND_ENGINE = {
    DPOConfig: (Set("disable_dropout", True, "the lab's policy has no dropout"),),
    RewardConfig: (Set("center_rewards_coefficient", None, "the lab's Bradley-Terry loss has no centring term"),),
}
OPENRLHF_ENGINE = (
    Set("--adam.betas", (0.9, 0.999), "torch's AdamW defaults, as the lab's"),
    Set("--adam.weight_decay", 0.0, "the lab's AdamW has no weight decay"),
    Set("--lr_scheduler", "constant", "the lab's AdamW keeps its learning rate"),
    Set("--lr_warmup_ratio", 0.0),
    Set("--max_norm", 1.0, "the lab clips the gradient norm at 1"),
)
TRL_CLASS = {DPOConfig: "DPOConfig", RewardConfig: "RewardConfig"}
OPENRLHF_ENTRY = {DPOConfig: "openrlhf.cli.train_dpo", RewardConfig: "openrlhf.cli.train_rm"}


def pair_knob_lines(algo: PairRunConfig, framework: str) -> list[tuple[str, object, list[Line]]]:
    """Per knob, in the config's order: its name, its value and the lines it contributes to `framework`'s
    configuration (ValueError for a framework with no trainer for it)."""
    if framework not in PAIR_FRAMEWORKS:
        raise ValueError(
            f"format={framework!r} cannot take algo={algo.name}: verl 0.9's trainers (PPO-style RL, "
            f"SFT) fit no offline DPO or reward model; allowed: {', '.join(PAIR_FRAMEWORKS)}"
        )
    rules = RULES[type(algo), framework]
    knobs = {k: v for k, v in dataclasses.asdict(algo).items() if k not in DESCRIPTIVE}
    lines = []
    for knob, value in knobs.items():
        produced = rules.get(knob, no(f"no {framework} counterpart is recorded for this knob"))(knobs, knob)
        lines.append((knob, value, produced if isinstance(produced, list) else [produced]))
    return lines


def _engine(algo: PairRunConfig, framework: str) -> tuple[Set, ...]:
    return (*TRL_ENGINE, *TRL_KIND_ENGINE[type(algo)]) if framework == "trl" else OPENRLHF_ENGINE


def pair_settings(algo: PairRunConfig, framework: str) -> dict[str, object]:
    """Every field the export sets, engine settings included; a field set twice with two values is a bug."""
    chosen: dict[str, object] = {}
    for line in [*_engine(algo, framework), *(x for _, _, xs in pair_knob_lines(algo, framework) for x in xs)]:
        if isinstance(line, Set):
            if line.field in chosen and chosen[line.field] != line.value:
                raise AssertionError(f"{line.field} set to {chosen[line.field]!r} and {line.value!r}")
            chosen[line.field] = line.value
    return chosen


def export_pair_config(algo: PairRunConfig, framework: str, command: str = "") -> str:
    """The configuration as TRL Python source (`trl`: a `DPOConfig` or `RewardConfig`) or a bash script of
    OpenRLHF flags (`openrlhf`: `train_dpo` or `train_rm`)."""
    lines = pair_knob_lines(algo, framework)
    pair_settings(algo, framework)  # refuses an export that sets one field twice
    made = [f"# Made by: {command}"] if command else []
    title = f"the lab's {algo.title} (algo {algo.name})"
    engine = _engine(algo, framework)
    if framework == "trl":
        name = TRL_CLASS[type(algo)]
        return "\n".join(
            [
                f"# TRL {name} for {title}.",
                f"# Every lab knob appears once below: as a {name} field, or as a comment saying why it does not map.",
                *made,
                f"from trl import {name}",
                "",
                f"config = {name}(",
                "    # the lab's optimiser and model (no knob names them)",
                *(trl_line(line, None) for line in engine),
                *(trl_line(line, f"{knob}={value}") for knob, value, xs in lines for line in xs),
                ")",
                "",
            ]
        )
    return "\n".join(
        [
            f"# OpenRLHF 0.11 command line for {title}.",
            "# Every lab knob appears once below: as a flag, or as a comment saying why it does not map.",
            "# Add your model and data: --model.model_name_or_path … --data.dataset … --eval.dataset …",
            *made,
            "flags=(",
            "    # the lab's optimiser (no knob names it)",
            *(openrlhf_line(line, None) for line in engine),
            *(openrlhf_line(line, f"{knob}={value}") for knob, value, xs in lines for line in xs),
            ")",
            f'deepspeed --module {OPENRLHF_ENTRY[type(algo)]} "${{flags[@]}}" "$@"',
            "",
        ]
    )
