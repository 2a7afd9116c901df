"""rl_core's layout holds: the formulas import nothing of the engine, the run machinery or the bridge; within
rl_core only the CLI imports the bridge; rl_core never imports streamlit or the app; and the engine version hashes
every source file of the sub-packages. Imports are read from the source (every `import` statement, at any depth of a
module), so a lazy import inside a function counts as much as one at the top."""

import ast
from pathlib import Path

from rl_core.runs import reuse

RL_CORE = Path(reuse.__file__).resolve().parents[1]
SUB_PACKAGES = ("formulas", "engine", "runs", "bridge")


def module_name(path: Path) -> str:
    parts = path.relative_to(RL_CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(text: str, package: str) -> set[str]:
    """Every module the import statements of `text` name, at any depth, relative imports resolved against `package`
    (the module's own package); `from a import b` names both `a` and `a.b`, since b may be a module."""
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def imported_modules(path: Path) -> set[str]:
    name = module_name(path)
    return imports_in(path.read_text(), name if path.name == "__init__.py" else name.rpartition(".")[0])


def sources(sub_package: str | None = None) -> list[Path]:
    return sorted((RL_CORE / sub_package if sub_package else RL_CORE).rglob("*.py"))


def inside(name: str, *packages: str) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def offending(names: set[str], *packages: str) -> list[str]:
    return sorted(name for name in names if inside(name, *packages))


def offending_imports(files: list[Path], *packages: str) -> dict[str, list[str]]:
    found = {module_name(path): offending(imported_modules(path), *packages) for path in files}
    return {module: names for module, names in found.items() if names}


def test_the_import_reader_sees_lazy_relative_and_package_imports():
    assert "torch" in imported_modules(RL_CORE / "formulas" / "kl.py")
    text = (
        "def f():\n    from rl_core.runs.store import RunStore\n"
        "from rl_core import engine\nimport rl_core.bridge.parity as p\nfrom .. import runs\n"
        "from .masking import masked_mean\n"
    )
    names = imports_in(text, "rl_core.formulas")
    assert offending(names, "rl_core.engine", "rl_core.runs", "rl_core.bridge") == [
        "rl_core.bridge.parity",
        "rl_core.engine",
        "rl_core.runs",
        "rl_core.runs.store",
        "rl_core.runs.store.RunStore",
    ]
    assert "rl_core.formulas.masking" in names and offending(imports_in("import torch\n", "rl_core"), "rl_core") == []


def test_formulas_import_nothing_of_the_engine_the_runs_or_the_bridge():
    files = sources("formulas")
    assert {"kl", "losses", "advantages", "masking", "loss_terms"} <= {path.stem for path in files}
    assert offending_imports(files, "rl_core.engine", "rl_core.runs", "rl_core.bridge") == {}


def test_within_rl_core_only_the_cli_reaches_the_bridge():
    files = [path for path in sources() if not path.is_relative_to(RL_CORE / "bridge") and path.name != "cli.py"]
    assert {"trainer", "store", "config", "runner"} <= {path.stem for path in files}
    assert offending_imports(files, "rl_core.bridge") == {}


def test_rl_core_never_imports_streamlit_or_the_app():
    assert offending_imports(sources(), "streamlit", "ui", "app_pages", "app") == {}


def test_the_top_level_holds_what_every_part_reads_and_each_module_sits_in_a_sub_package():
    top = {path.name for path in RL_CORE.glob("*.py")}
    assert top == {
        "__init__.py",
        "__main__.py",
        "api.py",
        "cli.py",
        "config.py",
        "console.py",
        "messages.py",
        "numbers.py",
    }
    for sub_package in SUB_PACKAGES:
        assert (RL_CORE / sub_package / "__init__.py").is_file()


def test_the_engine_version_hashes_the_sources_of_every_sub_package():
    # engine_version hashes ROOT/rl_core and ROOT/toy_tasks recursively (tests/test_reuse.py): ROOT must be the
    # repository, two levels above rl_core/runs/reuse.py
    assert RL_CORE.parent == reuse.ROOT and set(reuse.ENGINE_PACKAGES) == {"rl_core", "toy_tasks"}
