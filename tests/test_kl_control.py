import pytest

from rl_core.formulas.kl_control import adaptive_beta


@pytest.mark.parametrize(
    "measured_kl, expected",
    [(0.16, 0.2), (0.151, 0.2), (0.15, 0.1), (0.1, 0.1), (0.067, 0.1), (0.066, 0.05), (0.0, 0.05)],
)
def test_adaptive_beta_doubles_above_and_halves_below_the_band(measured_kl, expected):
    # target 0.1: the band is [0.1/1.5, 1.5·0.1] = [0.0667, 0.15]
    assert adaptive_beta(0.1, measured_kl, 0.1) == pytest.approx(expected)


def test_adaptive_beta_needs_a_positive_target():
    with pytest.raises(ValueError, match="target_kl"):
        adaptive_beta(0.1, 0.2, 0.0)
