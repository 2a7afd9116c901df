import streamlit as st

from rl_core.engine.preference_optimisation import dpo_loss, implicit_reward, ipo_loss
from ui.dpo import dpo_lab, talk_to_fit
from ui.experiments_panel import see_it_happen
from ui.story import formula

st.title("DPO and IPO: the policy learns from the pairs themselves")
talk_to_fit("dpo", dpo_lab("dpo"))
see_it_happen("dpo")

st.subheader("The problem")
st.markdown(
    "RLHF fits a reward model to preference pairs, then runs RL against it: two models, a sampler in the loop, and "
    "a learned reward the policy can exploit (the reward-model page shows it happen). The pairs are what people "
    "actually said. Can the policy learn from them directly?"
)
st.subheader("The idea")
st.markdown(
    "The KL-regularised objective `max E[r] − β KL(π‖π_ref)` has a closed-form optimum, "
    "π*(y|x) ∝ π_ref(y|x) exp(r(x, y)/β). Read backwards, every policy is optimal for *some* reward: its "
    "**implicit reward** β log(π_θ/π_ref). Put that reward into the Bradley-Terry likelihood of the labels and the "
    "reward model disappears: the loss is on the policy, computed from four sequence log-probabilities per pair "
    "(policy and frozen reference, chosen and rejected). No sampling during training; the charts sample the policy "
    "every few steps only to show where it went."
)
formula(
    "The implicit reward (Rafailov et al. 2023, eq. 5)",
    r"r_\theta(x, y) = \beta \log\frac{\pi_\theta(y|x)}{\pi_{\text{ref}}(y|x)}",
    implicit_reward,
    "Zero for every response at the start (π_θ = π_ref), so the held-out accuracy starts at 0: a tie counts "
    "wrong. TRL logs its means as `rewards/chosen` and `rewards/rejected`, their difference as `rewards/margins` "
    "and the share of pairs where the chosen one is higher as `rewards/accuracies`.",
)
formula(
    'The DPO loss (Rafailov et al. 2023, eq. 7; TRL `loss_type="sigmoid"`)',
    [
        r"h = \log\frac{\pi_\theta(y_w|x)}{\pi_{\text{ref}}(y_w|x)} "
        r"- \log\frac{\pi_\theta(y_l|x)}{\pi_{\text{ref}}(y_l|x)}",
        r"\mathcal{L}_{\text{DPO}} = -\frac{1}{N}\sum_i \log\sigma(\beta\, h_i)",
    ],
    dpo_loss,
    "Bradley-Terry on the implicit rewards: log 2 ≈ 0.693 at the start. **β's role**: it is the KL coefficient "
    "the implicit reward assumes. A small β makes a large change of log-probability worth little reward, so the "
    "policy must move far to order a pair; a large β orders pairs with small moves and then stops pushing "
    "(the gradient on a pair is β σ(−β h)). Try β = 0.01 and β = 1 and watch the KL: after 100 steps "
    "(seeds 0 and 1) it measured 1.5 per token at β = 0.01, with the gold success down to 0.25–0.41, against "
    "0.22–0.29 at β = 1, with the gold success at 0.54–0.61.",
)
formula(
    'The IPO loss (Azar et al. 2023; TRL `loss_type="ipo"`)',
    [
        r"\bar h = \frac{1}{|y_w|}\log\frac{\pi_\theta(y_w|x)}{\pi_{\text{ref}}(y_w|x)} - "
        r"\frac{1}{|y_l|}\log\frac{\pi_\theta(y_l|x)}{\pi_{\text{ref}}(y_l|x)}",
        r"\mathcal{L}_{\text{IPO}} = \frac{1}{N}\sum_i \Big(\bar h_i - \frac{1}{2\beta}\Big)^2",
    ],
    ipo_loss,
    "DPO's sigmoid keeps pushing an ordered pair apart, ever more weakly, for ever; with labels that are "
    "deterministic the optimum is infinitely far from the reference. IPO regresses the log-ratio difference onto a "
    "target, 1/(2β), and pulls back a pair pushed past it. Each response's log-ratio is divided by its token count "
    "|y| first, as TRL's `ipo` does (the IPO authors confirmed this per-token form is the one behind their "
    "results): summed over tokens, h grows with length, and one target would be loose for long responses and tight "
    'for short ones. So β here means what `beta` means in TRL\'s `DPOConfig(loss_type="ipo")`.',
)
st.subheader("The surprise: both log-probabilities fall")
st.markdown(
    "Watch the log-probability chart. The loss only asks that the *difference* h grows; nothing says where "
    "log π(y_w) should go. Here, as in large models, both fall: the rejected responses faster, the chosen ones "
    "too. Probability leaves both for other responses, so the gold "
    "success of the policy's own samples (the judge the labels stand for) need not rise with the held-out accuracy, "
    "and the KL from the reference grows as it goes. DPO learns a ranking of the pairs it saw; what the policy "
    "then writes is another question, which is why the chart samples it."
)
