"""The advantage-normalisation selector and MaxRL: hand-computed cases, the existing estimators as its settings
(bit for bit), and the knobs' validation."""

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.formulas import advantages as adv
from rl_core.formulas.estimators import AdvantageInputs, estimate_advantages

R = torch.tensor([1.0, 0.0, 1.0, 1.0])  # two groups of G = 2
EPS = 1e-6


@pytest.mark.parametrize(
    "mean, std, expected",
    [
        ("group", "none", [0.5, -0.5, 0.0, 0.0]),
        ("leave_one_out", "none", [1.0, -1.0, 0.0, 0.0]),
        ("batch", "none", [0.25, -0.75, 0.25, 0.25]),
        ("none", "none", [1.0, 0.0, 1.0, 1.0]),
        # group std of the first group: |±½|·√2 = 0.7071; the second group's is 0
        ("group", "group", [0.5 / (0.5**0.5 + EPS), -0.5 / (0.5**0.5 + EPS), 0.0, 0.0]),
        # batch std (unbiased) of [1, 0, 1, 1]: √(0.75 / 3) = 0.5
        ("group", "batch", [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0]),
        ("batch", "batch", [0.25 / (0.5 + EPS), -0.75 / (0.5 + EPS), 0.25 / (0.5 + EPS), 0.25 / (0.5 + EPS)]),
    ],
)
def test_selector_by_hand(mean, std, expected):
    torch.testing.assert_close(adv.normalized_advantages(R, 2, mean, std), torch.tensor(expected))


@pytest.mark.parametrize("seed", range(5))
def test_grpo_dr_grpo_and_rloo_are_settings_of_the_selector_bit_for_bit(seed):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (24,), generator=generator).float() * 0.3  # groups of equal rewards included
    assert torch.equal(adv.normalized_advantages(rewards, 4, "group", "group"), adv.grpo_advantages(rewards, 4))
    assert torch.equal(adv.normalized_advantages(rewards, 4, "group", "none"), adv.dr_grpo_advantages(rewards, 4))
    assert torch.equal(adv.normalized_advantages(rewards, 4, "leave_one_out", "none"), adv.rloo_advantages(rewards, 4))


def test_selector_refuses_unknown_settings_by_name():
    with pytest.raises(ValueError, match="adv_norm_mean='median'"):
        adv.normalized_advantages(R, 2, "median", "none")
    with pytest.raises(ValueError, match="adv_norm_std='token'"):
        adv.normalized_advantages(R, 2, "group", "token")


def test_maxrl_by_hand():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0])
    expected = [3.0, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1, 0, 0, 0, 0]  # (R − p)/p with p = ¼, ¾, 0
    torch.testing.assert_close(adv.maxrl_advantages(rewards, 4), torch.tensor(expected))


def test_maxrl_weights_a_rarely_solved_prompt_more_than_grpo_does():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    maxrl, grpo = adv.maxrl_advantages(rewards, 4), adv.grpo_advantages(rewards, 4)
    # GRPO gives the lone success (¼ solved) and the lone failure (¾ solved) mirror-image weights; MaxRL does not.
    assert grpo[0] == pytest.approx(-grpo[7])
    assert maxrl[0] / -maxrl[7] == pytest.approx(3.0)


def _estimate(preset: str, rewards: torch.Tensor, **overrides) -> torch.Tensor:
    algo = get_preset(preset, **overrides)
    mask = torch.ones(len(rewards), 3)
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1] = rewards
    return estimate_advantages(algo, AdvantageInputs(token_rewards, mask, None, algo.num_generations))[0]


def test_the_knobs_reach_the_grpo_estimator():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1] * 8)
    assert torch.equal(_estimate("grpo", rewards, adv_norm_std="none"), _estimate("dr_grpo", rewards))
    lite = _estimate("lite_ppo", rewards)
    torch.testing.assert_close(lite[:, 0], adv.normalized_advantages(rewards, 8, "group", "batch"))
    assert not torch.allclose(lite, _estimate("grpo", rewards))


def test_changed_normalisation_needs_the_grpo_estimator():
    with pytest.raises(ValueError, match="advantage_estimator"):
        get_preset("rloo", adv_norm_std="batch")
    with pytest.raises(ValueError, match="adv_norm_mean"):
        get_preset("grpo", adv_norm_mean="median")


@pytest.mark.parametrize(
    "preset, formula",
    [("grpo", adv.grpo_advantages), ("dr_grpo", adv.dr_grpo_advantages), ("rloo", adv.rloo_advantages)],
)
def test_existing_presets_keep_their_advantages_through_the_selector(preset, formula):
    algo = get_preset(preset)
    G = algo.num_generations
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0] * (8 // G) * 2)[: 4 * G] * 0.7
    expected = formula(rewards, G)
    assert torch.equal(_estimate(preset, rewards)[:, 0], expected)


def test_a_std_below_the_floor_gives_advantage_zero():
    """R = 1,1,1,1 | 0,1,0,1 with the batch mean 0.75 and the group std: the first group's std is 0, so its
    deviations of 0.25 would be divided by ε alone (2.5e5); they give 0. The second group's unbiased std is √(1/3):
    −0.75/√(1/3) = −1.299038 and 0.25/√(1/3) = 0.433013."""
    R = torch.tensor([1.0, 1, 1, 1, 0, 1, 0, 1], dtype=torch.float64)
    a = adv.normalized_advantages(R, 4, mean="batch", std="group")
    expected = torch.tensor([0, 0, 0, 0, -1.299038, 0.433013, -1.299038, 0.433013], dtype=torch.float64)
    torch.testing.assert_close(a, expected, atol=1e-5, rtol=0)
    assert adv.normalized_advantages(R, 4, mean="none", std="group")[:4].tolist() == [0.0] * 4
    # std of 0, 1e-6, 0, 0 is √((0.75² + 3·0.25²)/3)·1e-6 = 5e-7 < 1e-6: 0, not 0.75e-6/(5e-7 + 1e-6) = 0.5.
    tiny = torch.tensor([0.0, 1e-6, 0.0, 0.0], dtype=torch.float64)
    assert adv.grpo_advantages(tiny, 4).tolist() == [0.0] * 4
    assert adv.normalized_advantages(tiny, 4, mean="group", std="batch").tolist() == [0.0] * 4
