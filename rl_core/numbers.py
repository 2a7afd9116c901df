"""How the lab writes a number for a reader: one formatter for the pages' sentences, the token view's derivations,
the charts' hover text, the verdicts, and (`tex`) the formulas KaTeX sets.

A minus is "−" (U+2212), as in the claims and the docs, never a hyphen; a power of ten is written ×10⁻⁵, not
e−05, which KaTeX would set as the product of a variable e and −05; a zero carries no sign ("0.0000", not
"+0.0000" or "−0.00" where a small value rounds to zero)."""

from __future__ import annotations

MINUS = "−"
_SUPERSCRIPT = str.maketrans("0123456789-+", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺")


def _split(value: float, spec: str) -> tuple[str, int | None]:
    """`value` formatted by `spec` (Python's format mini-language) as its mantissa and its power of ten, None
    where the format wrote none."""
    text = format(value, spec)
    if text[:1] in "+-" and "0" in text and not any(c in "123456789" for c in text):
        text = text[1:]  # a zero ("+0.0000", "-0.00" of a small negative value) has no sign
    mantissa, e, exponent = text.lower().partition("e")
    if not e or not exponent.lstrip("+-").isdigit():  # no exponent ("inf" and "nan" have no "e" either)
        return text, None
    return mantissa, int(exponent)


def number(value: float, spec: str = ".3g") -> str:
    """`value` as text: `format(value, spec)` with "−" for its minus and an exponent as ×10ⁿ in superscript
    (number(-2.77e-05, "+.3g") == "−2.77×10⁻⁵")."""
    mantissa, exponent = _split(value, spec)
    mantissa = mantissa.replace("-", MINUS)
    return mantissa if exponent is None else f"{mantissa}×10{str(exponent).translate(_SUPERSCRIPT)}"


def tex(value: float, spec: str = ".3g") -> str:
    """`value` for a LaTeX formula: `format(value, spec)` with an exponent as \\times 10^{n} (KaTeX sets the
    hyphen of math mode as a minus sign already): tex(2.77e-05, "+.3g") == "+2.77 \\times 10^{-5}"."""
    mantissa, exponent = _split(value, spec)
    return mantissa if exponent is None else rf"{mantissa} \times 10^{{{exponent}}}"
