"""The released frameworks' own option names, read from their wheels (downloaded once into the cache folder with
pip, never installed): verl's generated trainer config, OpenRLHF's `train_ppo_ray.py` argument parser, TRL's
class names. A test that needs one skips, saying why, only when the package index cannot be reached."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from functools import cache
from pathlib import Path

import platformdirs
import pytest
import yaml

VERL, OPENRLHF, TRL = "verl==0.9.1", "openrlhf==0.11.2", "trl==1.16.0"
WHEELS = Path(os.environ.get("RLHF_LAB_CACHE") or platformdirs.user_cache_dir("rlhf-lab")) / "framework-wheels"


@cache
def wheel(pin: str) -> zipfile.ZipFile:
    """The release's wheel, from the cache folder or downloaded there (no dependencies, nothing installed)."""
    name, version = pin.split("==")
    folder = WHEELS / f"{name}-{version}"
    found = sorted(folder.glob(f"{name}-{version}-*.whl"))
    if not found:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--timeout",
                "20",
                "--retries",
                "1",
                "--dest",
                str(folder),
                pin,
            ],
            capture_output=True,
            text=True,
        )
        found = sorted(folder.glob(f"{name}-{version}-*.whl"))
        if not found:
            pytest.skip(f"{pin} could not be downloaded from the package index: {done.stderr.strip()[-300:]}")
    return zipfile.ZipFile(found[0])


def member(pin: str, suffix: str) -> str:
    archive = wheel(pin)
    (path,) = [n for n in archive.namelist() if n.endswith(suffix)]
    return archive.read(path).decode()


@cache
def verl_config_keys() -> frozenset[str]:
    """Every dotted key of verl's generated PPO trainer config (groups and leaves)."""

    def keys(node: dict, prefix: str = ""):
        for key, value in node.items():
            yield prefix + key
            if isinstance(value, dict):
                yield from keys(value, f"{prefix}{key}.")

    return frozenset(keys(yaml.safe_load(member(VERL, "verl/trainer/config/_generated_ppo_trainer.yaml"))))


def openrlhf_parser(script: str = "train_ppo_ray") -> argparse.ArgumentParser:
    """OpenRLHF's own argument parser: the `script`'s (`train_ppo_ray`, `train_dpo`, `train_rm`) main block up to
    `parse_args`, run as written."""
    source = member(OPENRLHF, f"openrlhf/cli/{script}.py")
    start = source.index("    parser = argparse.ArgumentParser()")
    end = source.index("    args = parser.parse_args()")
    scope = {"argparse": argparse, "datetime": datetime.datetime}
    exec(textwrap.dedent(source[start:end]), scope)
    return scope["parser"]


@cache
def trl_class_names() -> frozenset[str]:
    """Every class TRL 1.16 defines anywhere in its package."""
    archive = wheel(TRL)
    names = set()
    for path in archive.namelist():
        if path.endswith(".py"):
            names |= set(re.findall(r"^class (\w+)", archive.read(path).decode(), re.MULTILINE))
    return frozenset(names)


@cache
def verl_registered() -> dict[str, frozenset[str]]:
    """The names verl 0.9.1 accepts for its policy losses (`register_policy_loss`) and advantage estimators
    (`AdvantageEstimator`), read from its source."""
    source = member(VERL, "verl/trainer/ppo/core_algos.py")
    estimators = source[source.index("class AdvantageEstimator") : source.index("ADV_ESTIMATOR_REGISTRY")]
    return {
        "actor_rollout_ref.actor.policy_loss.loss_mode": frozenset(
            re.findall(r'register_policy_loss\("(\w+)"\)', source)
        ),
        "algorithm.adv_estimator": frozenset(re.findall(r'= "(\w+)"', estimators)),
    }


# Run in TRL's virtualenv: each exported source builds its `config` (the export targets a GPU machine; here the same
# config is built on the CPU), and the listed fields' values come back as JSON.
TRL_BUILD = textwrap.dedent(
    """
    import functools, json, sys, warnings
    warnings.simplefilter("ignore")
    import trl
    for name in ("GRPOConfig", "DPOConfig", "RewardConfig"):
        setattr(trl, name, functools.partial(getattr(trl, name), use_cpu=True, bf16=False))
    built = {}
    for name, path, fields in json.load(open(sys.argv[1])):
        scope = {}
        exec(open(path).read(), scope)
        built[name] = {field: getattr(scope["config"], field) for field in fields}
    print(json.dumps(built))
    """
)


def trl_built(python: Path, sources: dict[str, str], fields: dict[str, list[str]], folder: Path) -> dict:
    """Each of `sources` (name → TRL Python source defining `config`) run by TRL in its virtualenv (`python`): per
    name, the values its `config` ends up with for `fields[name]`."""
    jobs = []
    for index, (name, source) in enumerate(sources.items()):
        path = folder / f"config_{index}.py"
        path.write_text(source)
        jobs.append((name, str(path), fields[name]))
    (folder / "jobs.json").write_text(json.dumps(jobs))
    (folder / "build.py").write_text(TRL_BUILD)
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [str(python), str(folder / "build.py"), str(folder / "jobs.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
