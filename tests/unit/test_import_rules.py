"""The import rules of architecture.md, checked three ways: a fresh interpreter, the AST of every file
under posenc/, and import-linter's contracts from pyproject.toml. That PE families never import each other is
checked here on the AST, with the families read from the registry (a new method needs no list updated)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POSENC = ROOT / "posenc"
FORBIDDEN_FOR_POSENC = ("service", "workers", "clients", "posenc_client")
HEAVY = ("torch", "fastapi", "celery", "starlette", "numpy")


def modules_loaded_by(statement: str) -> set[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("statement", ["import posenc.schemas", "import posenc", "import posenc.errors"])
def test_the_wire_contract_loads_no_heavy_dependency(statement: str) -> None:
    loaded = modules_loaded_by(statement)
    heavy = sorted(name for name in loaded if name.split(".")[0] in HEAVY)
    assert heavy == [], f"{statement} pulled in {heavy[:10]}"


def test_the_subprocess_check_can_see_a_heavy_import() -> None:
    """The check above would notice torch: importing the math does load it."""
    assert "torch" in modules_loaded_by("import posenc.pe")


def imported_top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


POSENC_FILES = sorted(POSENC.rglob("*.py"))


def test_posenc_has_files_to_check() -> None:
    assert any(path.name == "attention.py" for path in POSENC_FILES)
    assert any(path.parent.name == "pe" for path in POSENC_FILES)


@pytest.mark.parametrize("path", POSENC_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_posenc_never_imports_service_or_workers(path: Path) -> None:
    bad = imported_top_level_names(path) & set(FORBIDDEN_FOR_POSENC)
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_ast_check_sees_function_level_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from service.main import app\n    import workers.tasks\n")
    assert imported_top_level_names(sample) >= {"service", "workers"}


def test_import_linter_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports is not None, "import-linter is a dev dependency (pip install -e '.[dev]')"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


# What a family module may import from posenc.pe: the shared halves, never another family.
PE_SHARED = {"posenc.pe.ops", "posenc.pe.kinds", "posenc.pe.registry", "posenc.pe.types"}


def posenc_pe_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("posenc.pe."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("posenc.pe."):
                names.add(node.module)
            elif node.module == "posenc.pe":
                names.update(f"posenc.pe.{alias.name}" for alias in node.names)
    return names


def test_pe_families_never_import_each_other() -> None:
    from posenc.pe import list_methods

    families = sorted({spec.family for spec in list_methods()})
    assert len(families) >= 10
    for family in families:
        imported = posenc_pe_imports(POSENC / "pe" / f"{family}.py")
        others = sorted(name for name in imported if name not in PE_SHARED)
        assert others == [], f"posenc.pe.{family} imports {others}"
