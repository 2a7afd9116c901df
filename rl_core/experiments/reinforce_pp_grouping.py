"""With several samples of each prompt in the batch, REINFORCE++'s batch-wide normalisation mistakes a prompt's
difficulty for a response's merit; REINFORCE++-baseline subtracts the group's mean first.

REINFORCE++ whitens the returns over the whole batch, `(R_i − mean_batch R)/std_batch R`: a response to a prompt
that every one of its G samples solved gets a positive advantage, one to a prompt none solved a negative one,
although nothing tells the samples of such a prompt apart. The group baseline gives them `R_i − mean_group R = 0`
before the batch whitening (which shifts them only by the length-weighted mean of the centred advantages). An
earlier version of this claim, that the group baseline learns faster on digit_sum, failed (success, group minus
batch: −0.101 / −0.003 / −0.100 over seeds 0, 1, 2); the advantage weight is what the normalisation itself decides.
β = 0 in both arms, so the presets' different KL placements are no confound."""

from rl_core.experiments import Arm, Experiment
from rl_core.experiments._measures import mean_difference

BATCH, GROUP = "REINFORCE++ (batch mean)", "REINFORCE++-baseline (group mean)"
SHARED = dict(
    prompts_per_step=8,
    num_generations=8,
    gamma=1.0,
    beta=0.0,
    kl_estimator="k2",
    kl_in="loss",
    policy_loss="clip",
    epsilon=0.2,
    epsilon_high=0.2,
    loss_agg_mode="token-mean",
    ppo_epochs=2,
    num_minibatches=2,
    learning_rate=1e-3,
    temperature=1.0,
)

EXPERIMENT = Experiment(
    name="reinforce_pp_grouping",
    title="Batch-wide normalisation pushes prompts, not answers",
    plain="With the batch mean as baseline, groups whose answers all scored the same still get a large share of "
    "the push; with each group's own mean, almost none.",
    claim="With G samples of each prompt in the batch, REINFORCE++'s batch-wide normalisation puts a large share of "
    "the advantage weight on responses to prompts that all of their samples solved (or all failed) — pushing "
    "them up (or down) for the prompt's difficulty alone — where REINFORCE++-baseline's group mean gives them "
    "next to none.",
    source="REINFORCE++ (Hu et al. 2025); its -baseline variant for G > 1",
    arms=(
        Arm(BATCH, "reinforce_pp", {**SHARED, "advantage_estimator": "reinforce_pp"}),
        Arm(GROUP, "reinforce_pp_baseline", {**SHARED, "advantage_estimator": "reinforce_pp_baseline"}),
    ),
    knobs=("advantage_estimator",),
    task="caesar",
    steps=40,
    metric="share of Σ|Â| on responses of groups whose rewards are all equal, averaged over training, batch minus "
    "group mean",
    effect=mean_difference("equal_group_weight_share", BATCH, GROUP),
    expected="positive",
    run_fields={"sft_steps": 200},
    pages=("reinforce_pp",),
    charts=("equal_group_weight_share", "zero_adv_group_frac", "success_rate"),
)
