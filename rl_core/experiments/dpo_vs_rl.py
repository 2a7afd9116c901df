"""DPO against RLHF with a learned reward model, on the same preference data (the `preference` task's pairs):
GRPO optimises the Bradley-Terry reward model fitted to the pairs, DPO fits the policy to the pairs themselves,
both from the same SFT warm start and seed, for the same 30 steps.

GRPO runs at its own default β = 0.04, which does not hold it where the reward model is right (the reward-hacking
experiment): it piles on the exclamation marks the model likes, the learned reward climbs and the policy moves
nats per token from the reference. DPO has no reward model to exploit; the pairs themselves bound how far their
ranking can pull the policy, and β = 0.1 (TRL's default) charges it for every nat of log-ratio it spends. Both
records carry `kl_exact` of the policy's own samples (GRPO's training batch, DPO's fixed evaluation prompts), so
the claim compares one measure. The DPO arm also records TRL's `logps/chosen` and `logps/rejected` of its training
pairs: the loss asks only that their difference grow, and both fall."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import final_mean
from rl_core.experiments.reward_hacking import SHARED as RL_SHARED

GRPO = "GRPO against the reward model"
DPO = "DPO on the pairs"
GRPO_BETA = 0.04  # GRPO's own default KL coefficient

EXPERIMENT = Experiment(
    name="dpo_vs_rl",
    title="DPO against GRPO with the learned reward model",
    plain="Trained on the same preference pairs, GRPO against a reward model learned from them moves the model "
    "further from where it started than DPO does.",
    claim="On the same preference pairs and from the same warm start, GRPO against the reward model learned from "
    "them moves the policy further from the reference (exact KL per token) than DPO fitted to the pairs "
    "themselves.",
    source="Rafailov et al. 2023, Direct preference optimization; Xu et al. 2024, Is DPO superior to PPO for LLM "
    "alignment?; Rafailov et al. 2024, From r to Q* (both log-probabilities falling)",
    arms=(
        Arm(GRPO, "grpo", {**RL_SHARED, "beta": GRPO_BETA}),
        Arm(
            DPO, "dpo", {"loss_type": "sigmoid", "beta": 0.1, "learning_rate": 5e-4, "per_device_train_batch_size": 32}
        ),
    ),
    knobs=("algo",),
    task="preference",
    # 30 steps (40 before): enough for the effect, and the 16 runs train in about 30 s on 2 CPU cores. Seeds 0–7:
    # 8 of 8, 95 % interval [+1.11, +1.67]; held-out seeds 300–307: 8 of 8, [+1.20, +2.05].
    steps=30,
    metric="exact KL to the reference over the last 10 steps (nats per token), GRPO minus DPO",
    effect=lambda runs: final_mean(runs[GRPO], "kl_exact") - final_mean(runs[DPO], "kl_exact"),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("dpo",),
    charts=("success_rate", "kl_exact", "reward_mean", "logps/chosen", "logps/rejected"),
    together={"DPO: log π_θ(y|x) of the training pairs, chosen and rejected": ("logps/chosen", "logps/rejected")},
)
