"""The prefix-tree layout by hand on a small batch, and its logits and gradients against a padded pass."""

import pytest
import torch

from rl_core.engine import packing
from rl_core.engine.models import build_policy, position_ids_from_mask
from rl_core.engine.rollout import TokenBatch, response_logits, token_logprobs
from rl_core.engine.stacked_runs import stacked_trees
from rl_core.engine.tokenizer import build_char_tokenizer

PAD = 0


def batch_of(prompts: list[list[int]], responses: list[list[int]]) -> TokenBatch:
    """Rows `[left-padded prompt | right-padded response]` from token lists."""
    width, columns = max(map(len, prompts)), max(map(len, responses))
    sequences = [[PAD] * (width - len(p)) + p + r + [PAD] * (columns - len(r)) for p, r in zip(prompts, responses)]
    mask = [
        [0] * (width - len(p)) + [1] * (len(p) + len(r)) + [0] * (columns - len(r)) for p, r in zip(prompts, responses)
    ]
    return TokenBatch(
        sequences=torch.tensor(sequences),
        attention_mask=torch.tensor(mask),
        prompt_length=width,
        response_mask=torch.tensor([[1.0] * len(r) + [0.0] * (columns - len(r)) for r in responses]),
    )


def test_layout_of_a_small_batch_worked_out_by_hand():
    # Rows 0 and 2 answer prompt [5, 6]; row 1 answers [7]. Response lengths 3, 2 and 1.
    batch = batch_of([[5, 6], [7], [5, 6]], [[10, 11, 12], [20, 21], [30]])
    tree = packing.prefix_tree(batch.sequences, batch.attention_mask, batch.prompt_length, batch.response_mask)
    # Sequence 0 is prompt [5, 6] (first seen in row 0), sequence 1 is prompt [7]. A response's last token is never
    # an input, so row 2's only token is predicted by its prompt alone.
    assert tree.input_ids.tolist() == [[5, 6, 10, 11], [7, 20, 0, 0]]
    assert tree.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    T, F = True, False
    assert tree.attention_mask[:, 0].tolist() == [
        [[T, F, F, F], [T, T, F, F], [T, T, T, F], [T, T, T, T]],
        [[T, F, F, F], [T, T, F, F], [T, F, T, F], [T, F, T, T]],  # fillers see the prompt and earlier fillers
    ]
    # Flat indices into [2 × 4]: row 0's tokens at the prompt's last position, then at its tokens 10 and 11; past a
    # response's end, the prompt's last position again.
    assert tree.logit_index.tolist() == [[1, 2, 3], [4, 5, 4], [1, 1, 1]]
    # Its real tokens: all of sequence 0, the prompt and one response token of sequence 1; the rest is filler.
    assert tree.real.tolist() == [[T, T, T, T], [T, T, F, F]]


def test_token_index_lists_each_runs_real_positions_then_the_spare_slot():
    T, F = True, False
    real = torch.tensor([[T, F, T, T, F, F], [F, T, F, F, F, F]])
    # Run 0's three positions in order; run 1 has one, then the slot past the layout's six positions.
    assert packing.token_index(real, 3).tolist() == [[0, 2, 3], [1, 6, 6]]
    assert packing.token_index(torch.ones((2, 4), dtype=torch.bool), 4) is None  # nothing to leave out


def batch_with_responses(prompts: list[list[int]], lengths: list[int]) -> TokenBatch:
    generator = torch.Generator().manual_seed(0)
    return batch_of(prompts, [torch.randint(3, 40, (n,), generator=generator).tolist() for n in lengths])


def shared_prompts_batch():
    """Six rows: three distinct prompts of different lengths, each answered by two rows that are not next to each
    other, with responses of lengths 1 to 5."""
    prompts = [[1, 8, 9], [1, 4], [1, 6, 7, 3], [1, 8, 9], [1, 4], [1, 6, 7, 3]]
    return batch_with_responses(prompts, [5, 1, 3, 2, 4, 5])


def padded_logits(model, batch: TokenBatch) -> torch.Tensor:
    """The independent route: the whole padded batch with its 2-D mask, logits read at columns P − 1 … P + T − 2."""
    out = model(
        input_ids=batch.sequences,
        attention_mask=batch.attention_mask,
        position_ids=position_ids_from_mask(batch.attention_mask),
    )
    start = batch.prompt_length - 1
    return out.logits[:, start : start + batch.response_mask.shape[1]]


def assert_tree_pass_equals_padded_pass(batch: TokenBatch) -> None:
    """Logits where the response mask is 1, and the gradients of a masked loss, agree between the two routes."""
    torch.manual_seed(0)
    policy = build_policy("tiny", build_char_tokenizer())
    mask = batch.response_mask

    def loss_and_grads(logits):
        policy.zero_grad()
        loss = (token_logprobs(logits, batch.response_ids) * mask).sum()
        loss.backward()
        return [p.grad.clone() for p in policy.parameters()]

    tree = response_logits(policy, batch)
    padded = padded_logits(policy, batch)
    assert tree.shape == padded.shape
    torch.testing.assert_close(tree * mask[..., None], padded * mask[..., None], atol=1e-5, rtol=1e-5)
    for from_tree, from_padded in zip(loss_and_grads(tree), loss_and_grads(padded_logits(policy, batch))):
        torch.testing.assert_close(from_tree, from_padded, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("max_length", "packed_shape"),
    [
        (256, (3, 4 + 4 + 2)),  # one sequence per prompt: the longest is [1, 6, 7, 3] then 4 and 2 fed tokens
        (6, (4, 4 + 4)),  # at most max(6, P + T) = 9: that prompt's second response opens a sequence of its own
    ],
)
def test_tree_logits_and_gradients_equal_those_of_a_padded_pass(monkeypatch, max_length, packed_shape):
    monkeypatch.setattr(packing, "MAX_SEQUENCE_LENGTH", max_length)
    batch = shared_prompts_batch()
    assert_tree_pass_equals_padded_pass(batch)
    assert batch.prefix_tree.input_ids.shape == packed_shape
    assert batch.prefix_tree.attention_mask.dim() == 4


@pytest.mark.parametrize(
    ("prompts", "all_ones"),
    [
        ([[1, 8, 9], [1, 4, 4], [1, 6, 7]], True),  # no padding: causal attention needs no mask at all
        ([[1, 8, 9], [1, 4, 4, 2], [1, 6, 7, 3]], False),  # the first prompt left-padded, masked by the 2-D mask
    ],
)
def test_single_responses_run_as_the_padded_batch_itself(prompts, all_ones):
    """One response per prompt: packing would run as many tokens, so the tree is the batch, cut after its last
    input (the longest response's fourth token)."""
    batch = batch_with_responses(prompts, [2, 5, 1])
    assert_tree_pass_equals_padded_pass(batch)
    tree = batch.prefix_tree
    width = batch.prompt_length + 4
    assert torch.equal(tree.input_ids, batch.sequences[:, :width])
    assert tree.attention_mask.dim() == 2 and bool(tree.attention_mask.all()) == all_ones
    p = batch.prompt_length
    assert tree.logit_index.tolist() == [
        [p - 1, p, p - 1, p - 1, p - 1],
        [width + p - 1 + t for t in range(5)],
        [2 * width + p - 1] * 5,
    ]


def runs_inputs(batches: list[TokenBatch]) -> tuple[torch.Tensor, ...]:
    """`prefix_trees`' inputs for batches of one size: prompts left-padded to the widest, responses right-padded."""
    P = max(b.prompt_length for b in batches)
    T = max(b.response_mask.shape[1] for b in batches)

    def stack(field, left, right):
        return torch.stack([torch.nn.functional.pad(field(b), (left(b), right(b))) for b in batches])

    return (
        stack(lambda b: b.sequences[:, : b.prompt_length], lambda b: P - b.prompt_length, lambda b: 0),
        stack(lambda b: b.attention_mask[:, : b.prompt_length], lambda b: P - b.prompt_length, lambda b: 0),
        stack(lambda b: b.response_ids, lambda b: 0, lambda b: T - b.response_ids.shape[1]),
        stack(lambda b: b.response_mask, lambda b: 0, lambda b: T - b.response_mask.shape[1]).sum(-1),
        torch.tensor([b.response_mask.shape[1] for b in batches]),
        torch.tensor([b.prompt_length for b in batches]),
    )


def test_the_trees_of_many_runs_at_once_are_their_trees_laid_out_together():
    # The independent route: each batch's own `prefix_tree`, laid out together by `stacked_trees`. The second run
    # shares no prompt (alone it would run its padded batch), which the others' trees pack all the same.
    shared = shared_prompts_batch()
    distinct = batch_with_responses([[1, 2], [1, 3, 4, 5, 6], [1, 7], [1, 9, 9], [1, 5], [1, 2, 2]], [2, 6, 1, 1, 3, 2])
    other = batch_with_responses([[1, 4], [1, 4], [1, 4], [2], [1, 4], [2]], [3, 3, 1, 2, 2, 4])
    batches = [shared, distinct, other]
    assert [b.prefix_tree.attention_mask.dim() for b in batches] == [4, 2, 4]
    together = packing.prefix_trees(*runs_inputs(batches))
    for mine, theirs in zip(together, stacked_trees(batches, 6)):
        assert torch.equal(mine, theirs)
    # Asked for every run's own tree, it declines: the second run's own is its padded batch.
    assert packing.prefix_trees(*runs_inputs(batches), mixed=False) is None
    assert packing.prefix_trees(*runs_inputs([shared, other]), mixed=False) is not None


def test_runs_none_of_which_packs_are_left_to_their_padded_batches():
    singles = [batch_with_responses([[1, k], [1, k + 1], [2, k]], [2, 1, 3]) for k in (3, 6)]
    assert [b.prefix_tree.attention_mask.dim() for b in singles] == [2, 2]
    assert packing.prefix_trees(*runs_inputs(singles)) is None
