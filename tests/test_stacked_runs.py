"""Runs stacked along a run axis against the same runs alone: `rollout.sample`, `rollout.response_logits` and
`ValueModel.forward` of each model by itself (transformers' own GPT-2) are the independent route."""

import pytest
import torch

from rl_core.engine import stacked_runs
from rl_core.engine.models import ValueModel, build_policy
from rl_core.engine.rollout import encode_pairs, response_logits, sample, token_logprobs
from rl_core.engine.stacked_runs import Stack, StackedGPT2, sample_runs, stacked_trees, teacher_forced
from rl_core.engine.tokenizer import build_char_tokenizer

# Three runs with prompts of different widths (so each run's left padding differs from the stack's) and their
# own temperatures: what a sweep over seeds and a scalar knob hands the stack.
PROMPTS = [["ab>", "hgfed>", "c>"], ["xyz>", "q>", "rs>"], ["abcd>", "def>", "ghi>"]]
TEMPERATURES = [1.0, 0.7, 1.3]
SEEDS = [11, 12, 13]
G, MAX_NEW_TOKENS = 4, 10


def policies(count=3, shape="tiny"):
    """Policies with their own random weights, each pushed towards EOS (its logit raised by about 2.5 nats) so
    that rows finish at different steps and the samplers drop rows, as trained policies do."""
    tokenizer = build_char_tokenizer()
    made = []
    for seed in range(count):
        torch.manual_seed(seed)
        policy = build_policy(shape, tokenizer).eval()
        with torch.no_grad():
            eos = policy.transformer.wte.weight[tokenizer.eos_token_id]
            policy.transformer.ln_f.bias += 2.5 * eos / eos.norm() ** 2
        made.append(policy)
    return tokenizer, made


def generators():
    return [torch.Generator().manual_seed(s) for s in SEEDS]


def stacked(models, trainable=False) -> tuple[Stack, StackedGPT2]:
    stack = Stack(models, trainable)
    return stack, StackedGPT2(models[0], stack.views(grad=trainable))


@pytest.mark.parametrize("compact_at", [0.0, 0.75, 1.0])  # finished rows never leave, as set, at every step
def test_runs_sampled_together_are_the_runs_sampled_alone(monkeypatch, compact_at):
    monkeypatch.setattr(stacked_runs, "COMPACT_AT", compact_at)
    tokenizer, models = policies()
    together = sample_runs(stacked(models)[1], tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    for r, run in enumerate(together):
        alone = sample(models[r], tokenizer, PROMPTS[r], MAX_NEW_TOKENS, TEMPERATURES[r], generators()[r], G)
        assert torch.equal(run.sequences, alone.sequences)
        assert torch.equal(run.attention_mask, alone.attention_mask)
        assert torch.equal(run.response_mask, alone.response_mask)
        assert torch.equal(run.ended_with_eos, alone.ended_with_eos)
        assert run.prompts == alone.prompts and run.responses == alone.responses
        for field in ("logits", "old_logp", "entropy"):
            torch.testing.assert_close(getattr(run, field), getattr(alone, field), atol=1e-5, rtol=1e-5)
    # The loop dropped rows: some responses ended early while others ran on to the limit.
    lengths = torch.cat([run.lengths for run in together])
    assert lengths.min() < MAX_NEW_TOKENS and (lengths == MAX_NEW_TOKENS).any()


def test_the_same_stack_sampled_twice_gives_identical_rollouts():
    tokenizer, models = policies()
    _, model = stacked(models)
    first = sample_runs(model, tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    again = sample_runs(model, tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    for a, b in zip(first, again):
        assert torch.equal(a.sequences, b.sequences) and torch.equal(a.logits, b.logits)


def test_a_stacked_pass_gives_each_run_its_own_logits_and_gradients():
    tokenizer, models = policies()
    sampled = sample_runs(stacked(models)[1], tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    # The third run's batch has one response per prompt: its layout is the padded batch with a 2-D mask, not a
    # prefix tree, and the stack pads both kinds to one shape.
    prompts = [
        "ab>",
        "q>",
        "hgfed>",
        "x>",
        "yz>",
        "abc>",
        "k>",
        "lm>",
        "nop>",
        "r>",
        "st>",
        "uvw>",
    ]  # 12 rows, as theirs
    single = encode_pairs(tokenizer, prompts, [p[:-1][::-1] for p in prompts], torch.device("cpu"))
    batches = [sampled[0], sampled[1], single]
    assert [b.prefix_tree.attention_mask.dim() for b in batches] == [4, 4, 2]
    T = max(b.response_mask.shape[1] for b in batches)
    stack, model = stacked(models, trainable=True)
    layout = stacked_trees(batches, T)
    # Each run's tree is padded to the largest: the MLPs run on the real tokens only (`packing.token_index`).
    tokens = layout[4]
    assert tokens is not None and tokens.shape[1] < layout[0].shape[1]
    hidden = teacher_forced(model, layout)
    together = model._head(hidden.flatten(1, 2)).view(*hidden.shape[:3], -1) / 0.8

    def loss(logits, batch):  # a policy-gradient-like scalar that reaches every weight
        return -(token_logprobs(logits, batch.response_ids) * batch.response_mask).sum() / batch.response_mask.sum()

    sum(loss(logits[:, : b.response_mask.shape[1]], b) for logits, b in zip(together, batches)).backward()
    gradients = stack._split(stack.buffer.grad)
    for r, (policy, batch) in enumerate(zip(models, batches)):
        alone = response_logits(policy, batch, temperature=0.8)
        length = batch.response_mask.shape[1]
        valid = batch.response_mask.bool()
        torch.testing.assert_close(together[r, :, :length][valid], alone[valid], atol=1e-5, rtol=1e-5)
        policy.zero_grad()
        loss(alone, batch).backward()
        for name, parameter in policy.named_parameters():
            torch.testing.assert_close(gradients[name][r], parameter.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_a_stacked_critic_gives_each_run_its_own_values():
    tokenizer, models = policies()
    critics = [ValueModel.from_policy(policy) for policy in models]
    sampled = sample_runs(stacked(models)[1], tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    T = max(b.response_mask.shape[1] for b in sampled)
    stack = Stack(critics)
    model = StackedGPT2(critics[0], stack.views(grad=False))
    values = model.values(teacher_forced(model, stacked_trees(sampled, T)).flatten(1, 2))
    values = values.view(len(sampled), -1, T)
    for r, (critic, batch) in enumerate(zip(critics, sampled)):
        start, length = batch.prompt_length - 1, batch.response_mask.shape[1]
        alone = critic(batch.sequences, batch.attention_mask)[:, start : start + length]
        valid = batch.response_mask.bool()
        torch.testing.assert_close(values[r, :, :length][valid], alone[valid], atol=1e-5, rtol=1e-5)


def test_each_module_is_a_view_of_its_row_of_the_stack():
    _, models = policies()
    before = [m.transformer.h[1].mlp.c_fc.weight.detach().clone() for m in models]
    stack = Stack(models, trainable=True)
    with torch.no_grad():
        stack.views(grad=False)["transformer.h.1.mlp.c_fc.weight"].add_(torch.arange(3.0)[:, None, None] + 1)
    for r, (model, weight) in enumerate(zip(models, before)):
        assert torch.equal(model.transformer.h[1].mlp.c_fc.weight, weight + (r + 1))
        assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # still tied


def test_a_stack_of_one_run_is_that_run():
    tokenizer, models = policies(count=1)
    (run,) = sample_runs(stacked(models)[1], tokenizer, PROMPTS[:1], MAX_NEW_TOKENS, [0.9], generators()[:1], G)
    alone = sample(models[0], tokenizer, PROMPTS[0], MAX_NEW_TOKENS, 0.9, generators()[0], G)
    assert torch.equal(run.sequences, alone.sequences)


def test_modules_of_different_shapes_or_mismatched_inputs_are_refused():
    tokenizer, tiny = policies(count=1)
    _, small = policies(count=1, shape="small")
    with pytest.raises(ValueError, match="module 1 differs from module 0 in its shape"):
        Stack(tiny + small)
    with pytest.raises(ValueError, match="modules is empty"):
        Stack([])
    _, model = stacked(tiny + tiny)
    with pytest.raises(ValueError, match="needs 2 prompt lists, temperatures and generators; got 2, 1 and 2"):
        sample_runs(model, tokenizer, PROMPTS[:2], MAX_NEW_TOKENS, [1.0], generators()[:2], G)
    with pytest.raises(ValueError, match=r"the same number of prompts; got \[3, 2\]"):
        sample_runs(model, tokenizer, [PROMPTS[0], PROMPTS[1][:2]], MAX_NEW_TOKENS, [1.0, 1.0], generators()[:2], G)
