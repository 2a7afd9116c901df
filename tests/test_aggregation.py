import pytest
import torch

from rl_core.formulas.aggregation import LOSS_AGG_MODES, aggregate_loss

# two responses of lengths 1 and 3; the 9s sit on padding
LOSS = torch.tensor([[4.0, 9.0, 9.0], [1.0, 2.0, 3.0]])
MASK = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


@pytest.mark.parametrize(
    "mode, max_length, expected",
    [
        ("token-mean", None, (4 + 1 + 2 + 3) / 4),  # 2.5
        ("seq-mean-token-mean", None, (4 / 1 + 6 / 3) / 2),  # 3.0
        ("seq-mean-token-sum-norm", None, 10 / (2 * 3)),
        ("seq-mean-token-sum-norm", 5, 10 / (2 * 5)),
        ("seq-mean-token-sum", None, (4 + 6) / 2),
        ("seq-mean-token-sum", 5, (4 + 6) / 2),
    ],
)
def test_modes_by_hand(mode, max_length, expected):
    assert aggregate_loss(LOSS, MASK, mode, max_length).item() == pytest.approx(expected)


def test_the_modes_weigh_tokens_differently():
    # a token of the short response weighs 1/4 under token-mean but 1/2 under seq-mean-token-mean
    loss = torch.zeros(2, 3, requires_grad=True)
    grads = {}
    for mode in LOSS_AGG_MODES:
        loss.grad = None
        aggregate_loss(loss, MASK, mode).backward()
        grads[mode] = loss.grad.clone()
    torch.testing.assert_close(grads["token-mean"], MASK / 4)
    torch.testing.assert_close(grads["seq-mean-token-mean"], torch.tensor([[0.5, 0, 0], [1 / 6, 1 / 6, 1 / 6]]))
    torch.testing.assert_close(grads["seq-mean-token-sum-norm"], MASK / 6)
    torch.testing.assert_close(grads["seq-mean-token-sum"], MASK / 2)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_padding_columns_change_nothing(mode):
    padded_loss = torch.cat([LOSS, torch.full((2, 2), float("nan"))], 1)
    padded_mask = torch.cat([MASK, torch.zeros(2, 2)], 1)
    assert aggregate_loss(padded_loss, padded_mask, mode, 7).item() == pytest.approx(
        aggregate_loss(LOSS, MASK, mode, 7).item()
    )


def test_empty_responses_are_left_out_of_the_sequence_mean():
    loss = torch.cat([LOSS, torch.tensor([[100.0, 100.0, 100.0]])])
    mask = torch.cat([MASK, torch.zeros(1, 3)])
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert aggregate_loss(loss, mask, "token-mean").item() == pytest.approx(2.5)
    # Dr. GRPO's normaliser is a constant: B counts every row
    assert aggregate_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / 9)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(10 / 3)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_no_valid_token_gives_zero_and_a_finite_gradient(mode):
    loss = torch.ones(2, 3, requires_grad=True)
    value = aggregate_loss(loss, torch.zeros(2, 3), mode)
    value.backward()
    assert value.item() == 0.0
    assert (loss.grad == 0).all()


def test_unknown_mode_names_the_allowed_ones():
    with pytest.raises(ValueError, match=", ".join(LOSS_AGG_MODES)):
        aggregate_loss(LOSS, MASK, "sum")


def test_modes_tuple():
    assert LOSS_AGG_MODES == ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum")
