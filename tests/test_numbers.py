"""The lab's one number formatter: minus signs and powers of ten as a reader (and KaTeX) expects them."""

import math

from rl_core.numbers import number, tex


def test_a_minus_is_the_minus_sign_and_a_plus_stays():
    assert number(-0.91, "+.2f") == "−0.91" and number(0.25, "+.3g") == "+0.25"
    assert number(-0.004899, "+.4g") == "−0.004899"


def test_a_power_of_ten_is_written_times_ten_to_the_n():
    assert number(-2.77e-05, "+.3g") == "−2.77×10⁻⁵"
    assert number(3e21, "g") == "3×10²¹"
    # In a formula: \\times 10^{n}, and no "e" that KaTeX would set as a variable.
    assert tex(2.77e-05, "+.3g") == r"+2.77 \times 10^{-5}"
    assert tex(-1.5, ".4f") == "-1.5000"


def test_values_without_digits_pass_through():
    assert number(math.nan) == "nan" and number(-math.inf) == "−inf"


def test_a_zero_has_no_sign():
    assert number(0.0, "+.4f") == "0.0000" and number(-0.00001, "+.2f") == "0.00" and number(0.0, "+.3g") == "0"
    assert tex(0.0, "+.4f") == "0.0000" and tex(-0.0, ".4f") == "0.0000"
    assert number(0.004, "+.2f") == "0.00" and number(0.006, "+.2f") == "+0.01"
