"""DPO and IPO: the losses, implicit rewards and metrics by hand, their gradients and β's effect, the sequence
log-probabilities by an independent route, the knobs' validation, the records' schedule, and learning on the
`preference` task's pairs from its SFT warm start."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rl_core.engine.models import build_policy
from rl_core.engine.preference_optimisation import (
    DPOTraining,
    dpo_loss,
    implicit_reward,
    ipo_loss,
    log_ratio_difference,
    pair_lengths,
    pair_logprobs,
    preference_loss,
    preference_metrics,
    preference_warm_start,
    sequence_logprobs,
)
from rl_core.engine.reward_model import PreferencePair
from rl_core.engine.tokenizer import build_char_tokenizer
from toy_tasks import get_task

TOKENIZER = build_char_tokenizer()

# Two pairs used by the hand computations below: log π_θ of chosen and rejected, and the reference's.
CHOSEN, REJECTED = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
REF_CHOSEN, REF_REJECTED = torch.tensor([-2.0, -2.0]), torch.tensor([-2.0, -2.0])


def test_implicit_reward_and_log_ratio_difference_by_hand():
    # β (log π − log π_ref) with β = 0.5: chosen 0.5·(−1 + 2) = 0.5, 0.5·(−2 + 2) = 0; rejected 0.5·(−1), 0.5·(+1).
    assert implicit_reward(CHOSEN, REF_CHOSEN, 0.5).tolist() == [0.5, 0.0]
    assert implicit_reward(REJECTED, REF_REJECTED, 0.5).tolist() == [-0.5, 0.5]
    # h = (1) − (−1) = 2 for the first pair, (0) − (1) = −1 for the second.
    assert log_ratio_difference(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED).tolist() == [2.0, -1.0]


def test_dpo_loss_by_hand():
    # β = 0.5: β h = 1 and −0.5. −log σ(1) = log(1 + e^−1) = 0.313262, −log σ(−0.5) = log(1 + e^0.5) = 0.974077;
    # their mean is 0.643670.
    assert dpo_loss(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.5).item() == pytest.approx(0.643670, abs=1e-6)


# Token counts (EOS included) of the two pairs' chosen and rejected responses, for IPO's per-token form.
CHOSEN_LENGTHS, REJECTED_LENGTHS = torch.tensor([2.0, 4.0]), torch.tensor([1.0, 2.0])
ONE_TOKEN = torch.tensor([1.0])


def test_ipo_loss_by_hand_on_per_token_log_ratios_as_trl():
    # TRL 1.16's `loss_type="ipo"`: each response's log-ratio over its token count. Chosen log-ratios [1, 0] over
    # [2, 4] tokens: [0.5, 0]; rejected [−1, 1] over [1, 2]: [−1, 0.5]; h̄ = [1.5, −0.5].
    # β = 0.5, target 1/(2β) = 1: (0.5² + 1.5²) / 2 = (0.25 + 2.25) / 2 = 1.25.
    assert ipo_loss(
        CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, CHOSEN_LENGTHS, REJECTED_LENGTHS
    ).item() == pytest.approx(1.25, abs=1e-6)
    # β = 0.1, target 5: ((1.5 − 5)² + (−0.5 − 5)²) / 2 = (12.25 + 30.25) / 2 = 21.25.
    assert ipo_loss(
        CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.1, CHOSEN_LENGTHS, REJECTED_LENGTHS
    ).item() == pytest.approx(21.25, abs=1e-6)
    # One-token responses: h̄ = h = [2, −1], as the summed form: ((2 − 1)² + (−1 − 1)²) / 2 = 2.5 at β = 0.5.
    ones = torch.ones(2)
    assert ipo_loss(CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, ones, ones).item() == pytest.approx(2.5)


def test_ipo_gradient_by_hand_divides_each_pair_by_its_token_counts():
    # ∂L/∂log π_θ(y_w,i) = 2 (h̄_i − 1/(2β)) / (N |y_w,i|), ∂L/∂log π_θ(y_l,i) = −2 (h̄_i − 1/(2β)) / (N |y_l,i|).
    # β = 0.5, N = 2, h̄ − 1 = [0.5, −1.5]: chosen [0.5/2, −1.5/4] = [0.25, −0.375]; rejected [−0.5/1, 1.5/2] =
    # [−0.5, 0.75].
    chosen, rejected = CHOSEN.clone().requires_grad_(), REJECTED.clone().requires_grad_()
    ipo_loss(chosen, rejected, REF_CHOSEN, REF_REJECTED, 0.5, CHOSEN_LENGTHS, REJECTED_LENGTHS).backward()
    assert chosen.grad.tolist() == pytest.approx([0.25, -0.375], abs=1e-6)
    assert rejected.grad.tolist() == pytest.approx([-0.5, 0.75], abs=1e-6)
    # `preference_loss` picks the form by TRL's name: the same IPO value, and DPO on the sums (0.643670, below).
    args = (CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, CHOSEN_LENGTHS, REJECTED_LENGTHS)
    assert preference_loss("ipo", *args).item() == pytest.approx(1.25, abs=1e-6)
    assert preference_loss("sigmoid", *args).item() == pytest.approx(0.643670, abs=1e-6)


def test_pair_lengths_count_each_response_and_its_eos():
    chosen, rejected = pair_lengths(TOKENIZER, [PreferencePair("max>", "Max!!", "mx"), PreferencePair("a>", "", "b")])
    assert chosen.tolist() == [6.0, 1.0] and rejected.tolist() == [3.0, 2.0]


def test_at_the_reference_dpo_costs_log_2_and_ipo_its_squared_target():
    logps = torch.tensor([-4.0, -7.5, -0.3])
    for beta in (0.05, 0.1, 1.0):
        assert dpo_loss(logps, logps - 1, logps, logps - 1, beta).item() == pytest.approx(math.log(2))
        lengths = torch.tensor([3.0, 5.0, 1.0])
        assert ipo_loss(logps, logps - 1, logps, logps - 1, beta, lengths, lengths).item() == pytest.approx(
            1 / (4 * beta**2)
        )


def _gradients(loss_fn, h_chosen: float, beta: float) -> tuple[float, float]:
    """d loss / d log π_θ(y_w) and d loss / d log π_θ(y_l) for one pair whose chosen log-ratio is `h_chosen` and
    whose rejected log-ratio is 0 (so h = h_chosen)."""
    chosen = torch.tensor([-2.0 + h_chosen], requires_grad=True)
    rejected = torch.tensor([-5.0], requires_grad=True)
    loss_fn(chosen, rejected, torch.tensor([-2.0]), torch.tensor([-5.0]), beta).backward()
    return chosen.grad.item(), rejected.grad.item()


def test_dpo_gradient_of_one_pair_raises_chosen_and_lowers_rejected_by_beta_sigmoid():
    # h = 2, β = 0.5: dL/d log π(y_w) = −β σ(−β h) = −0.5 σ(−1) = −0.5 · 0.268941 = −0.134471; the rejected's is
    # the opposite. Gradient descent raises the chosen log-probability and lowers the rejected one by the same step.
    chosen, rejected = _gradients(dpo_loss, 2.0, 0.5)
    assert chosen == pytest.approx(-0.134471, abs=1e-6) and rejected == pytest.approx(0.134471, abs=1e-6)


def test_beta_makes_dpo_push_misordered_pairs_harder_and_ordered_ones_less():
    # An ordered pair (h = 2): β = 0.5 pushes with 0.5 σ(−1) = 0.134471, β = 2 with 2 σ(−4) = 2 · 0.017986 = 0.035972.
    assert -_gradients(dpo_loss, 2.0, 0.5)[0] == pytest.approx(0.134471, abs=1e-6)
    assert -_gradients(dpo_loss, 2.0, 2.0)[0] == pytest.approx(0.035972, abs=1e-6)
    # A misordered pair (h = −1): β = 0.5 pushes with 0.5 σ(0.5) = 0.311230, β = 2 with 2 σ(2) = 1.761594.
    assert -_gradients(dpo_loss, -1.0, 0.5)[0] == pytest.approx(0.311230, abs=1e-6)
    assert -_gradients(dpo_loss, -1.0, 2.0)[0] == pytest.approx(1.761594, abs=1e-6)
    # The loss of the ordered pair: −log σ(1) = 0.313262 at β = 0.5, −log σ(4) = 0.018150 at β = 2.
    assert dpo_loss(
        torch.tensor([0.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-3.0]), 2.0
    ).item() == pytest.approx(0.018150, abs=1e-6)


def test_ipo_gradient_pulls_h_to_its_target_from_either_side():
    # One-token responses (h̄ = h): dL/d log π(y_w) = 2 (h − 1/(2β)). β = 0.1 (target 5), h = 2: 2 · (−3) = −6: raise
    # the chosen response.
    def one_token_ipo(*args):
        return ipo_loss(*args, ONE_TOKEN, ONE_TOKEN)

    assert _gradients(one_token_ipo, 2.0, 0.1) == pytest.approx((-6.0, 6.0))
    # β = 0.5 (target 1), h = 2: 2 · 1 = +2: the pair is already further apart than the target; IPO pulls it back,
    # lowering the chosen response, where DPO would still push it up (above).
    assert _gradients(one_token_ipo, 2.0, 0.5) == pytest.approx((2.0, -2.0))
    # At the target, no gradient at all.
    assert _gradients(one_token_ipo, 1.0, 0.5) == pytest.approx((0.0, 0.0))


def test_preference_metrics_by_hand():
    # β = 0.5: implicit rewards chosen [0.5, 0], rejected [−0.5, 0.5]; means 0.25 and 0; the first pair is ordered,
    # the second not: accuracy 0.5; margins [1, −0.5], mean 0.25. Mean log-probs: chosen −1.5, rejected −2.
    metrics = {
        name: value.item()
        for name, value in preference_metrics(
            torch.tensor(0.7), CHOSEN, REJECTED, REF_CHOSEN, REF_REJECTED, 0.5
        ).items()
    }
    assert metrics == pytest.approx(
        {
            "loss": 0.7,
            "rewards/chosen": 0.25,
            "rewards/rejected": 0.0,
            "rewards/accuracies": 0.5,
            "rewards/margins": 0.25,
            "logps/chosen": -1.5,
            "logps/rejected": -2.0,
        }
    )


def test_sequence_logprobs_match_a_plain_pass_over_each_unpadded_sequence():
    torch.manual_seed(0)
    policy = build_policy("tiny", TOKENIZER).eval()
    prompts, responses = ["max>", "ab>", "max>"], ["Max!!", "x", "mx"]
    batched = sequence_logprobs(policy, TOKENIZER, prompts, responses)
    for prompt, response, value in zip(prompts, responses, batched.tolist()):
        # bos + prompt + response + eos, one sequence, no padding: the response tokens (EOS included) are
        # predicted by the logits one position earlier.
        ids = (
            [TOKENIZER.bos_token_id] + TOKENIZER.encode(prompt) + TOKENIZER.encode(response) + [TOKENIZER.eos_token_id]
        )
        with torch.no_grad():
            logp = torch.log_softmax(policy(torch.tensor([ids])).logits[0], dim=-1)
        start = 1 + len(prompt)
        expected = sum(logp[t - 1, ids[t]].item() for t in range(start, len(ids)))
        assert value == pytest.approx(expected, abs=1e-4)
    chosen, rejected = pair_logprobs(policy, TOKENIZER, [PreferencePair("max>", "Max!!", "mx")], frozen=True)
    assert chosen.item() == pytest.approx(batched[0].item(), abs=1e-5)
    assert rejected.item() == pytest.approx(batched[2].item(), abs=1e-5)


def test_training_rejects_bad_knobs_by_name():
    policy = build_policy("tiny", TOKENIZER)
    task = get_task("reverse")
    pairs = [PreferencePair("a1A>", "A1a", "a1A")] * 4
    for knobs, message in (
        ({"loss_type": "hinge"}, "loss_type='hinge' is unknown; allowed: sigmoid, ipo"),
        ({"beta": 0.0}, r"beta=0.0 is out of range; allowed: 0 < beta ≤ 10"),
        ({"beta": -1}, r"beta=-1 is out of range"),
        ({"beta": float("nan")}, r"beta=nan is out of range"),
        ({"beta": 11.0}, r"beta=11.0 is out of range"),
        ({"beta": True}, r"beta=True is out of range"),
        ({"learning_rate": 0}, r"learning_rate=0 is out of range; allowed: a number > 0"),
        ({"learning_rate": float("inf")}, r"learning_rate=inf is out of range"),
        ({"steps": 0}, r"steps=0 is out of range; allowed: an integer ≥ 1"),
        ({"batch_size": 2.5}, r"batch_size=2.5 is out of range"),
        ({"eval_every": 0}, r"eval_every=0 is out of range"),
    ):
        with pytest.raises(ValueError, match=message):
            DPOTraining(policy, pairs, task, **knobs)
    with pytest.raises(ValueError, match="at least 2"):
        DPOTraining(policy, pairs[:1], task)


def test_records_follow_the_schedule_and_train_the_policy_but_not_the_reference():
    """A random tiny policy on the `reverse` task (a verifier: its gold success needs no preparation)."""
    task = get_task("reverse")
    rng = random.Random(0)
    pairs = [PreferencePair(p, task.answer(p), p[:-1]) for p in task.sample_prompts(40, rng)]
    torch.manual_seed(0)
    policy = build_policy("tiny", TOKENIZER)
    training = DPOTraining(policy, pairs, task, steps=5, batch_size=8, eval_every=2, n_eval_prompts=16, seed=0)
    before = [p.clone() for p in training.reference.parameters()]
    records = list(training.steps())
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert [r["step"] for r in records if "eval_loss" in r] == [0, 2, 4, 5]  # before the first, every 2, the last
    assert "loss" not in records[0] and {"loss", "rewards/accuracies", "logps/rejected"} <= set(records[1])
    # Before any update the policy is its reference: every implicit reward is 0 (a tie, counted wrong), DPO costs
    # log 2, and k3 of the policy's samples is 0 up to rounding (the sampler's cached pass and the reference's
    # teacher-forced pass sum in other orders).
    first = records[0]
    assert first["eval_rewards/chosen"] == first["eval_rewards/rejected"] == first["eval_rewards/accuracies"] == 0
    assert first["eval_loss"] == pytest.approx(math.log(2)) and first["kl_k3"] == pytest.approx(0, abs=1e-9)
    assert 0 <= first["success_rate"] <= 1
    assert all(torch.equal(a, b) for a, b in zip(before, training.reference.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, training.policy.parameters()))
    # The last record's held-out loss is the one recomputed from the finished policy by the pure functions.
    with torch.no_grad():
        chosen, rejected = pair_logprobs(training.policy, TOKENIZER, training.held_out)
        ref_chosen, ref_rejected = pair_logprobs(training.reference, TOKENIZER, training.held_out)
    assert records[-1]["eval_loss"] == pytest.approx(
        dpo_loss(chosen, rejected, ref_chosen, ref_rejected, 0.1).item(), abs=1e-5
    )
    assert records[-1]["kl_k3"] > 0 and len(training.held_out) == 8


def test_the_trainers_ipo_step_is_on_per_token_log_ratios():
    """The held-out IPO loss after a few updates, recomputed in plain Python from sequence log-probabilities and
    the responses' lengths in characters (+1 for EOS; the tokenizer has a token per character)."""
    task = get_task("reverse")
    pairs = [PreferencePair(p, task.answer(p), p[:-1]) for p in task.sample_prompts(40, random.Random(0))]
    torch.manual_seed(0)
    training = DPOTraining(
        build_policy("tiny", TOKENIZER),
        pairs,
        task,
        loss_type="ipo",
        beta=0.5,
        steps=3,
        batch_size=8,
        n_eval_prompts=4,
        seed=0,
    )
    records = list(training.steps())
    assert records[0]["eval_loss"] == pytest.approx(1.0)  # π_θ = π_ref: (0 − 1/(2β))² = 1
    with torch.no_grad():
        logps = [
            t.tolist()
            for t in (
                *pair_logprobs(training.policy, TOKENIZER, training.held_out),
                *pair_logprobs(training.reference, TOKENIZER, training.held_out),
            )
        ]
    squares = []
    for pair, c, r, ref_c, ref_r in zip(training.held_out, *logps):
        h = (c - ref_c) / (len(pair.chosen) + 1) - (r - ref_r) / (len(pair.rejected) + 1)
        squares.append((h - 1.0) ** 2)
    summed = [((c - ref_c) - (r - ref_r) - 1.0) ** 2 for c, r, ref_c, ref_r in zip(*logps)]
    assert records[-1]["eval_loss"] == pytest.approx(sum(squares) / len(squares), abs=1e-5)
    assert abs(sum(summed) / len(summed) - sum(squares) / len(squares)) > 1e-3, "the two forms differ here"


LEARNING_SEEDS = (0, 1, 2)


@pytest.mark.slow  # three SFT warm starts of the `preference` task (about 15 s each), then six short runs
@pytest.mark.parametrize("seed", LEARNING_SEEDS)
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_a_short_run_orders_held_out_pairs_while_both_log_probabilities_fall(seed, loss_type):
    # Measured (1000 pairs, label noise 0.1, β = 0.1, lr 5e-4, 30 steps of 32 pairs): held-out accuracy 0.73–0.79
    # (it starts at 0, every implicit reward tied; chance is 0.5); logps/chosen fell by 0.6–2.6 nats and
    # logps/rejected by more, 1.9–4.7, on every seed and loss.
    task = get_task("preference")
    policy = preference_warm_start(task, seed)
    pairs = task.preference_pairs(1000, random.Random(seed), label_noise=0.1)
    training = DPOTraining(policy, pairs, task, loss_type=loss_type, beta=0.1, learning_rate=5e-4, steps=30, seed=seed)
    records = list(training.steps())
    start, end = records[0], records[-1]
    assert end["eval_rewards/accuracies"] >= 0.65
    assert end["eval_rewards/margins"] > 0
    # The well-known surprise: the chosen responses also become less likely; only the rejected fall further.
    assert end["eval_logps/chosen"] < start["eval_logps/chosen"] - 0.3
    assert (
        end["eval_logps/rejected"] - start["eval_logps/rejected"]
        < end["eval_logps/chosen"] - start["eval_logps/chosen"]
    )
    assert end["eval_rewards/chosen"] < 0
    assert start["kl_k3"] == pytest.approx(0, abs=1e-9) and end["kl_k3"] > 0.01
