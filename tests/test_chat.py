"""Talking to a checkpoint: answers and top tokens of a model whose distribution is set by hand, the prompt check's
messages, the probe a run records at every step, the bound on kept models, and the page section under AppTest."""

import gc
import json
import math
import time

import pytest
import torch

from app_driver import app_test_on
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine.chat import ChatModels, Probe, answer, check_prompt, example_prompts, prompt_form, top_tokens
from rl_core.engine.models import build_policy
from rl_core.engine.tokenizer import build_char_tokenizer
from ui.chat import MAX_FRAMES, probe_figure
from ui.jobs import Job, KeptModels, LiveLoop

TOKENIZER = build_char_tokenizer()
EOS = TOKENIZER.eos_token_id
A, B = TOKENIZER.convert_tokens_to_ids(["a", "b"])


def constant_model(probabilities: dict[int, float]) -> torch.nn.Module:
    """A tiny GPT-2 whose next-token distribution is `probabilities` (token id → p, the rest ≈ 0) at every position.

    Every block's output projection and MLP are zero, so nothing but the embeddings reach `ln_f`; `ln_f`'s weight is
    0 and its bias the unit vector e₀, so its output is e₀ whatever the input, and the tied head gives
    logits z_v = wte[v, 0]: log p for the listed tokens, −30 for the others (e^−30 · 95 ≈ 9e−12 of mass)."""
    torch.manual_seed(0)
    model = build_policy("tiny", TOKENIZER).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            for linear in (block.attn.c_proj, block.mlp.c_proj):
                linear.weight.zero_()
                linear.bias.zero_()
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.transformer.wte.weight[:, 0] = -30.0
        for token, p in probabilities.items():
            model.transformer.wte.weight[token, 0] = math.log(p)
    return model.requires_grad_(False)


def test_greedy_answer_takes_the_likeliest_token_and_lists_the_top_tokens():
    said = answer(constant_model({A: 0.5, B: 0.3, EOS: 0.2}), TOKENIZER, "cab>", max_new_tokens=4)
    assert said.tokens == ["a"] * 4 and said.text == "aaaa" and not said.ended  # cut at the length limit
    assert said.probabilities == pytest.approx([0.5] * 4, abs=1e-6)
    for position in said.top:
        assert [token for token, _ in position[:3]] == ["a", "b", "<eos>"]
        assert [p for _, p in position[:3]] == pytest.approx([0.5, 0.3, 0.2], abs=1e-6)
        assert len(position) == 5


def test_greedy_answer_ends_at_eos():
    said = answer(constant_model({A: 0.3, B: 0.1, EOS: 0.6}), TOKENIZER, "cab>", max_new_tokens=4)
    assert said.tokens == ["<eos>"] and said.ended and said.text == ""
    assert said.probabilities == pytest.approx([0.6], abs=1e-6)


def test_a_sampled_answer_inverts_the_cumulative_distribution_at_the_seeds_uniform_draws():
    # Ids in order: EOS (2) holds [0, 0.2), a [0.2, 0.7), b [0.7, 1); one uniform number per position.
    model = constant_model({A: 0.5, B: 0.3, EOS: 0.2})
    for seed in range(5):
        said = answer(model, TOKENIZER, "cab>", max_new_tokens=6, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        expected = []
        while len(expected) < 6 and expected[-1:] != ["<eos>"]:
            u = torch.rand((1, 1), generator=generator).item()
            expected.append("<eos>" if u < 0.2 else "a" if u < 0.7 else "b")
        assert said.tokens == expected


def test_top_tokens_are_the_softmax_s_largest():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3]]))
    probabilities, ids = top_tokens(logits, 2)
    assert ids.tolist() == [[1, 2], [0, 2]]
    assert probabilities.flatten().tolist() == pytest.approx([0.6, 0.3, 0.5, 0.3])


def test_a_prompt_is_held_to_what_the_tasks_prompts_are_made_of():
    assert prompt_form("caesar") == ("abcdefgh", ">")  # toy_tasks/caesar.py: three of "abcdefgh", then ">"
    assert check_prompt("caesar", " cab ") == "cab>"  # the closing ">" is added
    assert check_prompt("caesar", "cab>") == "cab>"
    assert example_prompts("caesar", 3) == ["ggd>", "ced>", "gcd>"]
    allowed = "allowed: characters from 'abcdefgh', at most 3 of them, then '>' (added when left out), e.g. 'ggd>'"
    with pytest.raises(ValueError, match="task caesar's prompts never hold the characters 'x', 'z'") as error:
        check_prompt("caesar", "xaz")
    assert str(error.value).startswith("prompt 'xaz'") and str(error.value).endswith(allowed)
    with pytest.raises(ValueError, match="prompt 'abcd' is 4 characters long; allowed"):
        check_prompt("caesar", "abcd")
    with pytest.raises(ValueError, match="prompt is empty; allowed"):
        check_prompt("caesar", "  ")
    with pytest.raises(ValueError, match="'>' only closes a prompt"):
        check_prompt("caesar", "a>b")


def test_the_probe_reads_the_reference_s_top_tokens_under_any_policy():
    reference = constant_model({A: 0.5, B: 0.3, EOS: 0.2})
    probe = Probe.of("caesar", reference, TOKENIZER, max_new_tokens=4)
    assert probe.prompt == "ggd>" and probe.tokens[:3] == ("a", "b", "<eos>")
    # Every position of the greedy answer "aaaa" is as sure as the first: the first is probed, with no context.
    assert probe.context == "" and probe.input_ids == (TOKENIZER.bos_token_id, *TOKENIZER("ggd>")["input_ids"])
    assert probe.probabilities(reference)[:3] == pytest.approx([0.5, 0.3, 0.2], abs=1e-6)
    moved = probe.probabilities(constant_model({A: 0.1, B: 0.8, EOS: 0.1}))
    assert moved[:3] == pytest.approx([0.1, 0.8, 0.1], abs=1e-6) and sum(moved) == pytest.approx(1.0)


def test_a_long_run_s_animation_keeps_at_most_max_frames_evenly_spaced_with_the_first_and_last_step():
    probe = Probe("ggd>", "hh", ("d", "e"), (0, 1), (1, 2, 3))
    history = [(step, [0.5, 0.25, 0.25]) for step in range(0, 500, 2)]  # steps 0, 2, …, 498: 250 entries
    figure = probe_figure(probe, history)
    names = [frame.name for frame in figure.frames]
    assert names[0] == "0" and names[-1] == "498" and len(names) <= MAX_FRAMES
    assert names[:3] == ["0", "6", "12"]  # every third entry of 250, then the last
    assert [step["label"] for step in figure.layout.sliders[0].steps] == names
    assert list(figure.data[1].x) == ["d", "e", "other"]


class Owner:  # anything a weak reference can name
    pass


class Sized:
    def __init__(self, nbytes: int):
        self.nbytes = nbytes


def test_kept_models_stay_within_their_budget_oldest_out_and_go_with_their_run():
    kept = KeptModels(budget=10)
    first, second, third = Owner(), Owner(), Owner()
    kept.keep(first, Sized(4))
    kept.keep(second, Sized(4))
    assert kept.get(first) is not None and kept.get(second) is not None
    kept.keep(third, Sized(4))  # 12 > 10: the oldest goes
    assert kept.get(first) is None and kept.get(second) is not None and kept.get(third) is not None
    del second
    gc.collect()
    assert len(kept._kept) == 1
    lone = Owner()
    kept.keep(lone, Sized(50))  # larger than the budget alone: kept, the only one
    assert kept.get(lone) is not None and kept.get(third) is None


def test_a_run_keeps_its_models_and_a_probe_for_every_step():
    algo = get_preset("grpo", prompts_per_step=2, num_generations=2, ppo_epochs=1, num_minibatches=1)
    job = Job(RunConfig(algo=algo, task="caesar", steps=3, sft_steps=0), LiveLoop(1)).start()
    assert job.join(120) and job.snapshot().status == "finished", job.snapshot().error
    probe, history = job.probe()
    assert [step for step, _ in history] == [0, 1, 2, 3]
    assert all(sum(p) == pytest.approx(1.0) and len(p) == len(probe.tokens) + 1 for _, p in history)
    models = job.chat_models()
    assert isinstance(models, ChatModels) and models.task == "caesar"
    assert next(models.policy.parameters()).device.type == "cpu"
    assert not any(p.requires_grad for p in models.policy.parameters())
    # The probe at step 0 is the reference's own distribution, and the last one the kept policy's.
    assert history[0][1] == pytest.approx(probe.probabilities(models.reference), abs=1e-6)
    assert history[-1][1] == pytest.approx(probe.probabilities(models.policy), abs=1e-6)
    threads = torch.get_num_threads()
    reference, policy = models.answers("cab>")
    assert reference.prompt == policy.prompt == "cab>"
    assert torch.get_num_threads() == threads  # answered on the preset's count, the caller's given back


@pytest.mark.slow
def test_the_page_answers_a_prompt_before_and_after_rl_and_animates_the_probe():
    at = app_test_on("grpo", timeout=180)
    assert "Talk to this run" not in [h.value for h in at.subheader]  # nothing to talk to before a run
    at.select_slider(key="grpo:steps").set_value(2).run()
    at.select_slider(key="grpo:sft_steps").set_value(50).run()
    at.button(key="grpo:train").click().run()
    job = at.session_state["grpo:runs"][-1]
    try:
        deadline = time.monotonic() + 300
        while job.active:
            assert time.monotonic() < deadline
            time.sleep(1)
        at.run()
        assert not at.exception, at.exception
        assert "Talk to this run" in [h.value for h in at.subheader]
        assert at.text_input(key="grpo:chat_prompt").value == "ggd>"
        specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
        titles = [spec["layout"]["title"]["text"] for spec in specs if spec["data"][0]["type"] == "heatmap"]
        assert len(titles) == 2 and titles[0].startswith("Before RL: the reference (SFT) answers <b>")
        assert titles[1].startswith(f"After RL: run #{job.number} answers <b>")
        animation = next(spec for spec in specs if spec.get("frames"))
        assert [frame["name"] for frame in animation["frames"]] == ["0", "1", "2"]
        at.text_input(key="grpo:chat_prompt").set_value("abz").run()
        assert any(e.value.startswith("prompt 'abz' cannot be asked") for e in at.error)
        at.text_input(key="grpo:chat_prompt").set_value("abc").run()
        assert not at.error and "The right answer to `abc>` is `bcd`." in [c.value for c in at.caption]
    finally:
        job.stop()
        job.join(10)
