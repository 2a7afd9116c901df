"""Runs stacked along a run axis against the same runs alone: `rollout.sample` and `rollout.response_logits` of
each policy by itself are the independent route."""

import pytest
import torch

from rl_core.engine import stacked_runs
from rl_core.engine.models import build_policy
from rl_core.engine.rollout import encode_pairs, response_logits, sample, token_logprobs
from rl_core.engine.stacked_runs import StackedPolicies, sample_runs
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


@pytest.mark.parametrize("compact_at", [0.0, 0.75, 1.0])  # finished rows never leave, as set, at every step
def test_runs_sampled_together_are_the_runs_sampled_alone(monkeypatch, compact_at):
    monkeypatch.setattr(stacked_runs, "COMPACT_AT", compact_at)
    tokenizer, models = policies()
    together = sample_runs(StackedPolicies(models), tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
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
    stack = StackedPolicies(models)
    first = sample_runs(stack, tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    again = sample_runs(stack, tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    for a, b in zip(first, again):
        assert torch.equal(a.sequences, b.sequences) and torch.equal(a.logits, b.logits)


def test_a_stacked_pass_gives_each_run_its_own_logits_and_gradients():
    tokenizer, models = policies()
    sampled = sample_runs(StackedPolicies(models), tokenizer, PROMPTS, MAX_NEW_TOKENS, TEMPERATURES, generators(), G)
    # The third run's batch has one response per prompt: its layout is the padded batch with a 2-D mask, not a
    # prefix tree, and the stack pads both kinds to one shape.
    single = encode_pairs(tokenizer, ["ab>", "q>", "hgfed>"], ["ba", "q", "xyzzy"], torch.device("cpu"))
    batches = [sampled[0], sampled[1], single]
    assert [b.prefix_tree.attention_mask.dim() for b in batches] == [4, 4, 2]
    stack = StackedPolicies(models, requires_grad=True)
    together = stack.response_logits(batches, temperature=0.8)

    def loss(logits, batch):  # a policy-gradient-like scalar that reaches every weight
        return -(token_logprobs(logits, batch.response_ids) * batch.response_mask).sum() / batch.response_mask.sum()

    sum(loss(logits, batch) for logits, batch in zip(together, batches)).backward()
    for r, (model, batch) in enumerate(zip(models, batches)):
        alone = response_logits(model, batch, temperature=0.8)
        torch.testing.assert_close(together[r], alone, atol=1e-5, rtol=1e-5)
        model.zero_grad()
        loss(alone, batch).backward()
        for name, parameter in model.named_parameters():
            torch.testing.assert_close(stack.weights[name].grad[r], parameter.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_write_back_gives_each_model_its_stacked_weights():
    _, models = policies()
    stack = StackedPolicies(models)
    with torch.no_grad():
        for r in range(stack.runs):
            stack.weights["transformer.h.1.mlp.c_fc.weight"][r] += r + 1  # one rounding, as on the right below
    expected = [m.transformer.h[1].mlp.c_fc.weight.detach() + (r + 1) for r, m in enumerate(models)]
    stack.write_back(models)
    for model, weight in zip(models, expected):
        assert torch.equal(model.transformer.h[1].mlp.c_fc.weight, weight)


def test_a_stack_of_one_run_is_that_run():
    tokenizer, models = policies(count=1)
    (run,) = sample_runs(StackedPolicies(models), tokenizer, PROMPTS[:1], MAX_NEW_TOKENS, [0.9], generators()[:1], G)
    alone = sample(models[0], tokenizer, PROMPTS[0], MAX_NEW_TOKENS, 0.9, generators()[0], G)
    assert torch.equal(run.sequences, alone.sequences)
    (logits,) = StackedPolicies(models).response_logits([run])
    torch.testing.assert_close(logits, response_logits(models[0], run), atol=1e-5, rtol=1e-5)


def test_policies_of_different_shapes_or_mismatched_inputs_are_refused():
    tokenizer, tiny = policies(count=1)
    _, small = policies(count=1, shape="small")
    with pytest.raises(ValueError, match="policy 1 differs from policy 0 in n_layer, n_embd, n_head"):
        StackedPolicies(tiny + small)
    with pytest.raises(ValueError, match="policies is empty"):
        StackedPolicies([])
    stack = StackedPolicies(tiny + tiny)
    with pytest.raises(ValueError, match="needs 2 prompt lists, temperatures and generators; got 2, 1 and 2"):
        sample_runs(stack, tokenizer, PROMPTS[:2], MAX_NEW_TOKENS, [1.0], generators()[:2], G)
    with pytest.raises(ValueError, match=r"the same number of prompts; got \[3, 2\]"):
        sample_runs(stack, tokenizer, [PROMPTS[0], PROMPTS[1][:2]], MAX_NEW_TOKENS, [1.0, 1.0], generators()[:2], G)
    with pytest.raises(ValueError, match="1 batches for a stack of 2 runs"):
        stack.response_logits([encode_pairs(tokenizer, ["ab>"], ["ba"], torch.device("cpu"))])
