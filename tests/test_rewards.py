import pytest
import torch

from rl_core.formulas.rewards import kl_penalized_token_rewards, soft_overlong_punishment

KL = torch.tensor([[0.5, 1.0, 2.0], [3.0, 9.0, 9.0], [4.0, 4.0, 4.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
R = torch.tensor([1.0, -7.0, 2.0])


def test_kl_penalty_on_every_token_and_the_reward_on_the_last_by_hand():
    rewards = kl_penalized_token_rewards(R, KL, MASK, beta=0.1)
    expected = torch.tensor([[-0.05, -0.1, 1.0 - 0.2], [-7.0 - 0.3, 0.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(rewards, expected)


def test_reward_clip_bounds_only_the_sequence_reward():
    rewards = kl_penalized_token_rewards(R, KL, MASK, beta=0.1, reward_clip=5.0)
    torch.testing.assert_close(rewards[1], torch.tensor([-5.0 - 0.3, 0.0, 0.0]))
    torch.testing.assert_close(rewards[0], torch.tensor([-0.05, -0.1, 1.0 - 0.2]))
    large_kl = kl_penalized_token_rewards(torch.tensor([0.0]), torch.tensor([[100.0]]), torch.ones(1, 1), 1.0, 5.0)
    assert large_kl.item() == -100.0


def test_token_rewards_sum_to_reward_minus_the_summed_penalty():
    rewards = kl_penalized_token_rewards(R, KL, MASK, beta=0.3)
    torch.testing.assert_close(rewards.sum(-1), torch.tensor([1.0 - 0.3 * 3.5, -7.0 - 0.3 * 3.0, 0.0]))


def test_padding_columns_change_nothing():
    padded = kl_penalized_token_rewards(
        R, torch.cat([KL, torch.full((3, 2), 50.0)], 1), torch.cat([MASK, torch.zeros(3, 2)], 1), beta=0.1
    )
    torch.testing.assert_close(padded[:, :3], kl_penalized_token_rewards(R, KL, MASK, beta=0.1))
    assert (padded[:, 3:] == 0).all()


def test_beta_may_be_a_tensor_and_inputs_are_untouched():
    kl = KL.clone()
    rewards = kl_penalized_token_rewards(R, kl, MASK, beta=torch.tensor(0.1))
    torch.testing.assert_close(rewards, kl_penalized_token_rewards(R, KL, MASK, beta=0.1))
    assert torch.equal(kl, KL)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_soft_overlong_punishment_by_hand(dtype):
    # L_max = 20, L_cache = 4: free up to 16 tokens, linear from 16 to 20, −1 beyond
    lengths = torch.tensor([5, 16, 17, 18, 19, 20, 21], dtype=dtype)
    punishment = soft_overlong_punishment(lengths, max_length=20, cache_length=4)
    assert punishment.is_floating_point()
    torch.testing.assert_close(punishment, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))


@pytest.mark.parametrize("cache_length", [0, -1, 21])
def test_soft_overlong_punishment_rejects_a_bad_buffer(cache_length):
    with pytest.raises(ValueError, match="cache_length"):
        soft_overlong_punishment(torch.tensor([3]), max_length=20, cache_length=cache_length)


def test_the_trainer_counts_the_eos_in_the_overlong_length():
    """Reverse task, L_max 8, L_cache 2 (DAPO's 0.2 of 8, rounded): |y| counts the EOS, as verl's
    `valid_response_length` does, so an EOS answer of 7 tokens gets (6 − 7)/2 = −0.5 and one of 6 tokens 0."""
    from rl_core.algorithms import get_preset
    from rl_core.config import RunConfig
    from rl_core.engine import trainer as trainer_module
    from rl_core.engine.rollout import Rollout

    lengths, ended = [7, 6, 8, 4], [True, True, False, True]  # the third hit the limit without EOS
    B, T, V = len(lengths), 8, 5
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).float()
    rollout = Rollout(
        sequences=torch.zeros(B, T + 1, dtype=torch.long),
        attention_mask=torch.ones(B, T + 1, dtype=torch.long),
        prompt_length=1,
        response_mask=mask,
        logits=torch.zeros(B, T, V),
        old_logp=torch.zeros(B, T),
        entropy=torch.zeros(B, T),
        ended_with_eos=torch.tensor(ended),
        prompts=["a1A>"] * B,
        responses=["zzz"] * B,  # wrong answers: the task's reward is 0, what remains is the punishment
    )
    trainer = trainer_module.Trainer(RunConfig(algo=get_preset("dapo"), task="reverse"))
    assert (trainer.max_new_tokens, trainer.overlong_buffer) == (8, 2)
    rewards, _ = trainer.rewards(rollout)
    assert rewards.tolist() == [-0.5, 0.0, -1.0, 0.0]
