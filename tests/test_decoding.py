"""The lean decoding step and the categorical draw, against independent routes: a full `model(...)` pass over the
whole sequences, and the softmax probabilities themselves."""

import torch

from rl_core.engine.decoding import KVDecoder
from rl_core.engine.models import build_policy, position_ids_from_mask
from rl_core.engine.rollout import encode_prompts, sample_from_logits
from rl_core.engine.tokenizer import build_char_tokenizer

PROMPTS = ["ab>", "hgfed>", "c>"]  # different lengths: left padding is masked, and positions start after it
G = 2


def test_decoder_logits_match_a_full_pass_while_rows_are_dropped():
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    policy = build_policy("tiny", tokenizer).eval()
    prompt_ids, prompt_mask = encode_prompts(tokenizer, PROMPTS, torch.device("cpu"))
    rows, width, steps = len(PROMPTS) * G, prompt_ids.shape[1], 5
    continuation = torch.randint(3, len(tokenizer), (rows, steps), generator=torch.Generator().manual_seed(1))
    sequences = torch.cat([prompt_ids.repeat_interleave(G, 0), continuation], dim=1)
    mask = torch.cat([prompt_mask.repeat_interleave(G, 0), torch.ones_like(continuation)], dim=1)
    with torch.no_grad():
        full = policy(input_ids=sequences, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits

        decoder = KVDecoder(policy, prompt_ids, prompt_mask, G, max_new_tokens=steps)
        torch.testing.assert_close(decoder.first_logits, full[:, width - 1], atol=1e-5, rtol=1e-5)
        kept = torch.arange(rows)
        for t in range(steps - 1):
            if t == 2:  # rows 1 and 4 finish: the decoder goes on with the others only
                going_on = ~torch.isin(kept, torch.tensor([1, 4]))
                decoder.keep(going_on)
                kept = kept[going_on]
            logits = decoder.step(continuation[kept, t])
            torch.testing.assert_close(logits, full[kept, width + t], atol=1e-5, rtol=1e-5)
    assert kept.tolist() == [0, 2, 3, 5]


def test_categorical_draws_follow_the_softmax_and_never_pick_an_impossible_token():
    logits = torch.tensor([0.0, 1.0, -1.0, 2.0, float("-inf")])
    draws = sample_from_logits(logits.expand(200_000, 5), torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=5).double() / draws.numel()
    probabilities = torch.softmax(logits.double(), -1)
    # Four standard errors of a frequency estimated from 200 000 draws.
    tolerance = 4 * (probabilities * (1 - probabilities) / draws.numel()).sqrt()
    assert ((frequencies - probabilities).abs() <= tolerance).all(), (frequencies, probabilities)
    assert frequencies[4] == 0


def test_categorical_draws_are_reproducible_from_the_generator():
    logits = torch.randn(64, 98, generator=torch.Generator().manual_seed(3))
    first = sample_from_logits(logits, torch.Generator().manual_seed(7))
    again = sample_from_logits(logits, torch.Generator().manual_seed(7))
    other = sample_from_logits(logits, torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)
