import threading

import pytest
import torch
from transformers import AutoTokenizer, GPT2LMHeadModel

from rl_core.engine.models import (
    MODEL_PRESETS,
    ValueModel,
    build_policy,
    frozen_reference,
    load_policy,
    model_config,
    position_ids_from_mask,
    select_device,
)
from rl_core.engine.tokenizer import build_char_tokenizer


def test_char_tokenizer_round_trips_text_and_saves_like_any_hf_tokenizer(tmp_path):
    tokenizer = build_char_tokenizer()
    text = "abc> 12+3=15!"
    ids = tokenizer.encode(text)
    assert len(ids) == len(text)  # one id per character, no special tokens added
    assert tokenizer.decode(ids) == text
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.encode(text) == ids
    assert reloaded.eos_token_id == 2


def test_presets_have_the_documented_shapes():
    tokenizer = build_char_tokenizer()
    gpt2 = model_config("gpt2", tokenizer)
    assert (gpt2.n_layer, gpt2.n_embd, gpt2.n_head) == (12, 768, 12)
    tiny = build_policy("tiny", tokenizer)
    assert (tiny.config.n_layer, tiny.config.n_embd) == (2, 64)
    assert tiny.config.vocab_size == len(tokenizer)
    assert set(MODEL_PRESETS) >= {"tiny", "small", "gpt2"}
    with pytest.raises(ValueError, match="allowed: tiny, small, gpt2"):
        model_config("huge", tokenizer)


def test_policy_loads_from_a_local_folder_with_identical_outputs(tmp_path):
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    policy = build_policy("tiny", tokenizer)
    policy.save_pretrained(tmp_path)
    loaded = load_policy(tmp_path)
    assert isinstance(loaded, GPT2LMHeadModel)
    ids = torch.tensor([[1, 5, 6, 7]])
    torch.testing.assert_close(policy(ids).logits, loaded(ids).logits)


def test_models_built_and_loaded_in_parallel_threads_come_out_whole(tmp_path):
    """While `from_pretrained` runs, transformers turns `tie_weights` and torch's init functions into no-ops for the
    whole process. Without the models' lock, two loader threads (30 loads each) beside a builder thread (60 builds)
    had 59 of 60 loads fail on a meta tensor and 59 of 60 policies come out with an untied LM head; this smaller run
    fails the same way."""
    tokenizer = build_char_tokenizer()
    build_policy("tiny", tokenizer).save_pretrained(tmp_path)
    errors, built, critics = [], [], []

    def load():
        for _ in range(10):
            try:
                load_policy(tmp_path).to("cpu")
            except Exception as error:  # noqa: BLE001 - any failure is the defect under test
                errors.append(error)

    def build():
        for _ in range(20):
            built.append(build_policy("tiny", tokenizer))
            critics.append(ValueModel(model_config("tiny", tokenizer)))

    threads = [threading.Thread(target=f) for f in (load, build, load)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(policy.lm_head.weight is policy.transformer.wte.weight for policy in built)
    # GPT-2 initialises embeddings with std 0.02; skipped initialisation leaves whatever the memory held.
    assert all(0.015 < critic.backbone.wte.weight.std().item() < 0.025 for critic in critics)


def test_reference_is_a_frozen_copy():
    policy = build_policy("tiny", build_char_tokenizer())
    reference = frozen_reference(policy)
    assert all(not p.requires_grad for p in reference.parameters())
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)
    assert not torch.equal(next(policy.parameters()), next(reference.parameters()))


def test_value_model_starts_from_the_policy_backbone_and_round_trips(tmp_path):
    policy = build_policy("tiny", build_char_tokenizer())
    critic = ValueModel.from_policy(policy)
    torch.testing.assert_close(critic.backbone.wte.weight, policy.transformer.wte.weight)
    ids, mask = torch.tensor([[0, 1, 5, 6]]), torch.tensor([[0, 1, 1, 1]])
    values = critic(ids, mask)
    assert values.shape == (1, 4)
    critic.save(tmp_path)
    torch.testing.assert_close(ValueModel.load(tmp_path)(ids, mask), values)


def test_left_padding_does_not_change_a_row():
    """Positions count from the first real token, so a padded prompt sees the same logits as an unpadded one."""
    torch.manual_seed(0)
    policy = build_policy("tiny", build_char_tokenizer())
    plain = torch.tensor([[1, 5, 6]])
    padded = torch.tensor([[0, 0, 1, 5, 6]])
    padded_mask = torch.tensor([[0, 0, 1, 1, 1]])
    a = policy(plain, position_ids=position_ids_from_mask(torch.ones_like(plain))).logits[0]
    b = policy(padded, attention_mask=padded_mask, position_ids=position_ids_from_mask(padded_mask)).logits[0, 2:]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_device_selection():
    assert select_device("cpu").type == "cpu"
    assert select_device("auto").type in ("cuda", "mps", "cpu")
    with pytest.raises(ValueError, match="not a torch device"):
        select_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            select_device("cuda")


@pytest.mark.parametrize(
    "model, on_a_gpu_machine", [("tiny", "cpu"), ("small", "cpu"), ("gpt2", "cuda"), (None, "cuda")]
)
def test_auto_puts_only_gpt2_on_the_gpu(monkeypatch, model, on_a_gpu_machine):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto", model).type == on_a_gpu_machine
    assert select_device("cuda", model).type == "cuda"  # asked for by name, any model goes to the GPU
