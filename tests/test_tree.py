"""The tree's own rules: the linter passes; tests share helpers through the ``helpers`` package, never through
``benchmarks/`` or ``sys.path``; no run, session or issue numbers in test names (docs/decisions/)."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted(p for p in (ROOT / "tests").rglob("*.py"))


def _ruff() -> list[str] | None:
    try:
        import ruff  # noqa: F401 - the test extra brings it

        return [sys.executable, "-m", "ruff"]
    except ImportError:
        return [shutil.which("ruff")] if shutil.which("ruff") else None


def test_ruff_check_passes():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (the test extra brings it)")
    done = subprocess.run([*ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


BENCHMARK_MODULES = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_tests_neither_import_benchmarks_nor_edit_sys_path(path):
    text = path.read_text()
    tree = ast.parse(text)
    assert not {name.split(".")[0] for name in _imports(tree)} & BENCHMARK_MODULES, "a test imports benchmarks/"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if (node.value.attr, node.attr) in {("path", "insert"), ("path", "append")} and \
                    isinstance(node.value.value, ast.Name) and node.value.value.id == "sys":
                pytest.fail(f"{path.name}:{node.lineno}: sys.path edited (use the helpers package)")


NUMBERED = re.compile(r"def (test_\w*?(?:item|bar|issue|run|session)_?\d\w*)\(")


@pytest.mark.parametrize("path", TESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_test_names_carry_no_run_session_or_issue_numbers(path):
    assert not NUMBERED.findall(path.read_text())


# A GPU bar that misses is judged in the same run (``helpers.limits.at_limit``: an xfail naming the limit measured
# beside it, or a failure; docs/decisions/strict-xfail-measured-limit.md): no xfail mark, strict or not, gives a written
# reason for a GPU test (a story of earlier runs is no limit).
@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "gpu").glob("*.py")), ids=lambda p: p.name)
def test_a_gpu_bars_xfail_is_judged_against_a_limit_measured_in_the_same_run(path):
    marks = re.findall(r"mark\.xfail\(([^)]*)\)", path.read_text().replace("\n", " "))
    assert not marks, f"{path.name}: an xfail mark ({marks}); judge the bar against a limit measured beside it"
