from rl_core.algorithms.reinforce_pp import PRESET as REINFORCE_PP

PRESET = REINFORCE_PP.replace(
    name="reinforce_pp_baseline",
    title="REINFORCE++-baseline",
    summary="Group-mean baseline (R − mean of the group), then global whitening; k2 KL in the loss.",
    prompts_per_step=8,
    num_generations=8,
    advantage_estimator="reinforce_pp_baseline",
    kl_estimator="k2",
    kl_in="loss",
)
