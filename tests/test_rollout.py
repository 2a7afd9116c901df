"""The sampler against an independent route: a teacher-forced pass over what it sampled."""

import dataclasses

import torch

from rl_core.engine.models import build_policy
from rl_core.engine.rollout import frozen_response_logits, response_logits, sample, token_logprobs
from rl_core.engine.tokenizer import build_char_tokenizer

PROMPTS = ["ab>", "hgfed>", "c>"]  # different lengths: the left padding is exercised too
G = 4


def sampled():
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    policy = build_policy("tiny", tokenizer).eval()
    # A nudge towards EOS, seen by every route alike, so that responses end at different steps and the sampler
    # keeps decoding only the rows still going.
    eos_bias = torch.zeros(len(tokenizer))
    eos_bias[tokenizer.eos_token_id] = 2.0
    policy.lm_head.register_forward_hook(lambda module, inputs, output: output + eos_bias)
    generator = torch.Generator().manual_seed(1)
    return (
        policy,
        tokenizer,
        sample(policy, tokenizer, PROMPTS, 6, temperature=0.7, generator=generator, num_generations=G),
    )


def test_sampled_log_probs_and_entropies_match_a_teacher_forced_pass():
    policy, tokenizer, rollout = sampled()
    assert rollout.prompts == [p for p in PROMPTS for _ in range(G)]
    with torch.no_grad():
        logits = response_logits(policy, rollout, temperature=0.7)
    mask = rollout.response_mask
    torch.testing.assert_close(
        token_logprobs(logits, rollout.response_ids) * mask, rollout.old_logp, atol=1e-5, rtol=1e-5
    )
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1) * mask
    torch.testing.assert_close(entropy, rollout.entropy, atol=1e-5, rtol=1e-5)


def test_the_response_mask_ends_at_eos_and_truncated_rows_have_none():
    _, tokenizer, rollout = sampled()
    lengths = set(rollout.lengths.tolist())
    assert len(lengths) >= 3 and 6 in lengths, lengths  # early ends at several steps, and some rows truncated
    for row, length, ended in zip(
        rollout.response_ids.tolist(), rollout.lengths.tolist(), rollout.ended_with_eos.tolist()
    ):
        response = row[: int(length)]
        assert (tokenizer.eos_token_id in response) == ended
        if ended:
            assert response.index(tokenizer.eos_token_id) == len(response) - 1
        else:
            assert len(response) == 6


def test_rollouts_and_reference_logits_are_ordinary_tensors_a_loss_can_use():
    """Sampling and the reference pass run in inference mode; nothing of it may leak into a loss's graph."""
    policy, tokenizer, rollout = sampled()
    for field in dataclasses.fields(rollout):
        value = getattr(rollout, field.name)
        if isinstance(value, torch.Tensor):
            assert not value.is_inference(), field.name
    reference = frozen_response_logits(policy, rollout, 0.7)
    assert not reference.is_inference() and not reference.requires_grad
    logits = response_logits(policy, rollout, 0.7)
    torch.testing.assert_close(reference, logits.detach())
    logp = token_logprobs(logits, rollout.response_ids)
    ref_logp = token_logprobs(reference, rollout.response_ids)
    ratio = torch.exp(logp - rollout.old_logp)
    loss = (ratio * rollout.entropy + torch.exp(ref_logp - logp) * ref_logp).sum()
    loss.backward()
    assert policy.transformer.wte.weight.grad.abs().sum() > 0


def test_a_shuffled_rollout_reads_the_same_logits_through_its_parents_layout():
    policy, _, rollout = sampled()
    with torch.no_grad():
        logits = response_logits(policy, rollout)
        order = torch.randperm(len(rollout.prompts), generator=torch.Generator().manual_seed(2))
        shuffled = rollout.select(order)
        assert shuffled.prefix_tree.input_ids is rollout.prefix_tree.input_ids  # the parent's layout, re-indexed
        mask = shuffled.response_mask[..., None]
        torch.testing.assert_close(response_logits(policy, shuffled) * mask, logits[order] * mask)
        part = rollout.select(order[:5])
        assert part.prefix_tree.input_ids is not rollout.prefix_tree.input_ids  # a minibatch packs its own rows
        torch.testing.assert_close(response_logits(policy, part) * mask[:5], logits[order[:5]] * mask[:5])
