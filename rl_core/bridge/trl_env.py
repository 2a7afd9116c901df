"""A throwaway virtualenv holding TRL, for the code that checks the lab against TRL (the benchmark's GRPOTrainer
comparison, the test that builds a `GRPOConfig` from an export). TRL is not a dependency of the lab itself.

The virtualenv lives outside the repository, one folder per (torch, TRL) pin pair, and is reused while the pins
and the lab's environment stay. It sees the lab's own packages after its own (a `.pth` file naming the lab's
site-packages), so TRL runs on the lab's torch and transformers where its pins admit them, and pip installs only
what the lab lacks: TRL, datasets and theirs, about 40 MB in half a minute, where a torch of its own took 1.5 GB and
about three minutes. `python -m rl_core.bridge.trl_env [--root DIR]` creates it if needed and prints its
interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from importlib.metadata import version
from pathlib import Path

import platformdirs
from filelock import FileLock

TRL_PIN = "trl==1.16.*"
# The exact version, never a range: pip's find-links folder holds the CPU wheel of exactly this version, and a
# range would let pip fetch a newer CUDA build (gigabytes) instead.
TORCH_PIN = f"torch=={version('torch').split('+')[0]}"
# RLHF_LAB_TRL_VENV lets CI keep the virtualenvs in its cache folder.
DEFAULT_ROOT = Path(
    os.environ.get("RLHF_LAB_TRL_VENV") or Path(platformdirs.user_cache_dir("rlhf-lab")) / "bench-trl-venv"
)


# The start of every script run in the TRL virtualenv with a spec file: imports, the spec, the thread count, the
# tokenizer saved beside the lab's policy, and the exact-answer reward as the lab's tasks score it.
TRL_SCRIPT_PRELUDE = textwrap.dedent(
    """
    import functools
    import json
    import sys
    import time

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    spec = json.loads(open(sys.argv[1]).read())
    torch.set_num_threads(spec["threads"])
    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    eos = tokenizer.eos_token_id


    def exact_answer(completions, completion_ids, answer, **kwargs):
        # A response that hit the length limit without EOS never committed to its answer: reward 0.
        return [float(text == want and eos in ids) for text, ids, want in zip(completions, completion_ids, answer)]


    """
)


def trl_python(venv_root: Path = DEFAULT_ROOT) -> Path:
    """The interpreter of a virtualenv holding TRL over the lab's packages; created on first use and reused while the
    pins and the lab's site-packages stay."""
    pins = [TORCH_PIN, TRL_PIN]
    venv = Path(venv_root) / "-".join(p.replace("==", "").replace(".*", "") for p in pins)
    python = venv / "bin" / "python"
    lab_packages = sysconfig.get_paths()["purelib"]  # this interpreter's: the lab's environment
    wanted = {"pins": pins, "lab_packages": lab_packages}
    marker = venv / "installed.json"  # written last, so an interrupted install is redone rather than trusted
    Path(venv_root).mkdir(parents=True, exist_ok=True)
    # One maker at a time: the test processes that need TRL start together.
    with FileLock(Path(venv_root) / f"{venv.name}.lock"):
        if marker.exists() and json.loads(marker.read_text()) == wanted and python.exists():
            return python
        _make(venv, python, pins, lab_packages)
        marker.write_text(json.dumps(wanted))
    return python


def _make(venv: Path, python: Path, pins: list[str], lab_packages: str) -> None:
    print(f"installing {' '.join(pins)} into {venv} (once; about half a minute)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # A .pth file's folders go after the venv's own: what pip installs here wins, the lab's fill in the rest (its
    # torch satisfies the exact pin, so pip fetches no torch).
    (Path(own) / "lab-packages.pth").write_text(lab_packages + "\n")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"pip install {' '.join(pins)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def run_trl_script(python: Path, script: str, spec: dict, workdir: Path) -> dict:
    """`script` (a `TRL_SCRIPT_PRELUDE` script) run by TRL's interpreter `python` on `spec` in `workdir`, offline (the
    model and tokenizer are local folders, and nothing else may be fetched) and on the CPU; the JSON object it
    prints last. RuntimeError with the end of its stderr if it fails."""
    (workdir / "spec.json").write_text(json.dumps(spec))
    (workdir / "trl_run.py").write_text(script)
    env = os.environ | {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": "ignore",
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(
        [str(python), str(workdir / "trl_run.py"), str(workdir / "spec.json")],
        capture_output=True,
        text=True,
        env=env,
        cwd=workdir,
    )
    if done.returncode:
        raise RuntimeError(f"the TRL run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_core.bridge.trl_env", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help="folder of the virtualenvs (default: %(default)s)"
    )
    print(trl_python(parser.parse_args(argv).root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
