"""A model folder under RLHF_LAB_MODELS_DIR in the real app (`streamlit run app.py`, Chromium through Playwright):
the GRPO page's Model box lists it beside the presets, and Train trains it, its steps drawn on the charts."""

from urllib.parse import quote

import pytest
import torch

from app_driver import (
    CHART_CONTENTS,
    CHROMIUM,
    NO_CHROMIUM,
    PAGES,
    TRAINING_TIMEOUT_MS,
    browser_page,
    open_page,
    press_train,
    serve_app,
)
from hf_models import save_gpt2_folder

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]


def test_the_model_box_lists_a_folder_of_the_models_directory_and_train_trains_it(tmp_path):
    models = tmp_path / "models"
    folder = save_gpt2_folder(models / "gpt2-bpe")
    env = {
        "RLHF_LAB_MODELS_DIR": str(models),
        "RLHF_LAB_DB": str(tmp_path / "runs.sqlite"),
        "RLHF_LAB_CACHE": str(tmp_path / "cache"),
        "RLHF_LAB_HUB_MODELS": "openai-community/gpt2",
    }
    with serve_app(tmp_path / "streamlit.log", env=env) as (url, _), browser_page() as page:
        # A short run of small batches: the link sets the run's length, the Model box the model.
        open_page(page, f"{url}/grpo?steps=3&sft_steps=2&prompts_per_step=2&num_generations=2", PAGES["grpo"])
        page.get_by_role("button", name="All knobs").first.click()
        page.get_by_test_id("stSelectbox").filter(has_text="model").first.click()
        options = page.get_by_role("option").all_inner_texts()
        label = "gpt2-bpe: a Hugging Face model folder, with its own tokenizer"
        presets = ["tiny", "small", "gpt2"] if torch.cuda.is_available() else ["tiny", "small"]
        assert [o.split(":")[0] for o in options] == [*presets, "gpt2-bpe", "openai-community/gpt2"]
        assert label in options
        page.get_by_role("option", name=label).click()
        page.keyboard.press("Escape")
        page.wait_for_function(
            f"() => window.location.search.includes('model={quote(str(folder), safe='')}')"
            f" || decodeURIComponent(window.location.search).includes('model={folder}')",
            timeout=30_000,
        )
        press_train(page)
        # Every chart of the run reaches its third and last step.
        page.wait_for_function(f"() => ({CHART_CONTENTS})().includes('[1,2,3]')", timeout=TRAINING_TIMEOUT_MS)
        assert "Traceback" not in (tmp_path / "streamlit.log").read_text()
