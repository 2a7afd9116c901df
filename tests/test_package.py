"""The lab as a package: pyproject.toml reads its dependencies from requirements.txt, `pip install -e .` in a fresh
virtual environment gives the `rlhf-lab` command, which trains from any folder, and the README's notebook example
runs as written."""

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from rl_core import console

ROOT = Path(__file__).resolve().parent.parent


def requirement_lines(name: str) -> list[str]:
    return [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines() if line.split("#")[0].strip()]


def test_the_package_takes_its_dependencies_from_the_requirements_files():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["dependencies"]
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    assert project["project"]["optional-dependencies"]["cluster"] == requirement_lines("requirements-cluster.txt")
    assert project["project"]["scripts"] == {"rlhf-lab": "rl_core.console:main"}


def test_rlhf_lab_run_starts_the_app_from_the_sources_on_the_loopback_address(monkeypatch):
    started = []
    monkeypatch.setattr(os, "execv", lambda program, args: started.append((program, args, Path.cwd())))
    monkeypatch.chdir(ROOT.parent)
    console.main(["run", "--server.port", "8599"])
    assert started == [
        (
            sys.executable,
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                str(ROOT / "app.py"),
                "--server.address",
                "127.0.0.1",
                "--server.port",
                "8599",
            ],
            ROOT,
        )
    ]


def test_rlhf_lab_without_a_command_prints_its_usage(capsys):
    assert console.main([]) == 2
    assert capsys.readouterr().err.startswith("usage: rlhf-lab run [streamlit args] | rlhf-lab {train,")


@pytest.mark.slow  # a virtual environment, an editable install and a training run: about a minute
def test_pip_install_e_gives_a_command_that_trains_from_another_folder(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # The packages of the environment running the tests, visible to the new one: nothing is downloaded again.
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "-e", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        **os.environ,
        "RLHF_LAB_CACHE": str(tmp_path / "cache"),
        "RLHF_LAB_DB": str(tmp_path / "runs.sqlite"),
        "PYTHONPATH": "",
    }
    result = subprocess.run(
        [
            venv / "bin" / "rlhf-lab",
            "train",
            "--algo",
            "grpo",
            "--steps",
            "5",
            "--sft-steps",
            "5",
            "--set",
            "prompts_per_step=2",
            "--metrics-out",
            "m.jsonl",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=elsewhere,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert " steps=5 " in result.stdout.splitlines()[-1]
    assert len((elsewhere / "m.jsonl").read_text().splitlines()) == 5
    where = subprocess.run(
        [python, "-c", "import rl_core, toy_tasks; print(rl_core.__file__, toy_tasks.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        check=True,
    ).stdout.split()
    assert where == [str(ROOT / "rl_core" / "__init__.py"), str(ROOT / "toy_tasks" / "__init__.py")]


@pytest.mark.slow  # a 20-step run and a 2-seed experiment
def test_the_readmes_notebook_example_runs(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    [example] = re.findall(r"### From Python \(a notebook\).*?```python\n(.*?)```", readme, re.S)
    assert len(example.splitlines()) <= 12
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    monkeypatch.setenv("RLHF_LAB_CACHE", str(tmp_path / "cache"))
    exec(compile(example, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"[01]\.\d+ → [01]\.\d+", lines[0])
    assert [line.split()[0] for line in lines[1:4]] == ["18", "19", "20"]
    assert lines[-1] in ("shown", "weak", "not shown")
