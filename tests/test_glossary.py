"""The formulas' symbols on hover: which symbols a formula uses (and which look-alikes it does not), and the line
of tooltips under it."""

from ui.glossary import glossary_html, symbols_in


def shown(latex: str) -> list[str]:
    return [symbol.shown for symbol in symbols_in(latex)]


def test_the_clipped_surrogate_uses_the_ratio_the_advantage_and_the_clip_range():
    latex = (
        r"\ell_{i,t} = -\min\big(\rho_{i,t}\hat A_i,\ \mathrm{clip}(\rho_{i,t}, 1-\varepsilon_{low}, "
        r"1+\varepsilon_{high})\hat A_i\big)"
    )
    assert shown(latex) == ["ρ", "Â", "ε_low · ε_high"]


def test_look_alikes_are_not_mistaken_for_the_glossarys_symbols():
    assert shown(r"A_t = G_t - b") == [], "G_t is a return, not the group size"
    assert shown(r"A_{i,t} = \frac{G_{i,t} - \mathrm{mean}(G)}{\mathrm{std}(G) + \epsilon}") == [], (
        "a return again, and the ε that keeps a division finite is not the clip range"
    )
    assert shown(r"\mathcal{L} = \mathcal{L}_{\text{PPO}} + \mu\,\mathcal{L}_{\text{NLL}}") == [], (
        "VAPO's μ weighs the NLL term; only μ(·), the behaviour policy, is the glossary's"
    )
    assert shown(r"\gamma\delta_t") == []


def test_group_size_kl_estimators_lambda_beta_and_the_behaviour_policy():
    assert shown(r"\hat A_i = R_i - \frac{1}{G-1}\sum_{j\ne i} R_j") == ["Â", "G"]
    assert shown(r"\mathcal{L} = \frac{1}{G}\sum_i (\ell_{i,t} + \beta\, k_{3,t})") == ["k1 · k2 · k3", "G", "β"]
    assert shown(r"A_t = \delta_t + \gamma\lambda\, A_{t+1}") == ["λ"]
    assert shown(r"w_i = \exp\Big(\sum_t \log\frac{\pi_{old}(a_t)}{\mu(a_t)}\Big)") == ["μ"]


def test_the_line_holds_each_meaning_as_an_escaped_tooltip_and_nothing_without_symbols():
    line = glossary_html(r"\rho_t\,k_{3,t}")
    assert line.count("<abbr ") == 2 and "Symbols (hover):" in line
    assert 'title="ρ, the importance ratio π_θ(token) / π_old(token)' in line
    assert "k2 = ½(log ratio)² (biased, always ≥ 0)" in line
    assert glossary_html(r"x^2 + y^2") == ""
