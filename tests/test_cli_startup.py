"""The command line starts fast without a GPU: ``--help`` of every command and ``--version`` build their parsers
without importing torch, Triton or the ops (``jaggedperf.cli._defaults``), and ``list`` answers from its catalogue
(``jaggedperf.cli._catalogue``), in a fresh process within HELP_LIMIT_S; the values the parsers show and the catalogue
are the library's."""

import dataclasses
import importlib.util
import subprocess
import sys
import time

import pytest

from jaggedperf.cli import _catalogue

COMMANDS = ("repro", "run", "list", "doctor", "sweep", "report", "plot", "compare")
# measured on the 2-core dev machine beside three test suites: 0.45-0.65 s a --help (torch's import alone: 2-4 s)
HELP_LIMIT_S = 2.0


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_parsers_import_no_torch():
    done = _fresh("import sys; from jaggedperf.cli import build_parser, version_text; build_parser(); version_text(); "
                  "heavy = sorted(m for m in ('torch', 'triton', 'jaggedperf.ops', 'jaggedperf.impls.registry') "
                  "if m in sys.modules); print(heavy)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


QUICK = [["--help"], ["--version"], *([c, "--help"] for c in COMMANDS), ["list"], ["list", "--op", "jagged_softmax"]]


@pytest.mark.timed
@pytest.mark.parametrize("argv", QUICK, ids=lambda argv: " ".join(argv))
def test_help_version_and_list_take_under_two_seconds(argv, monkeypatch):
    monkeypatch.delenv("JAGGEDPERF_PLUGINS", raising=False)
    start = time.monotonic()
    done = _fresh(f"import sys; from jaggedperf.cli import main; sys.exit(main({argv!r}))")
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert took < HELP_LIMIT_S, f"jaggedperf {' '.join(argv)} took {took:.2f} s (limit {HELP_LIMIT_S} s)"


def test_list_imports_no_torch_and_says_what_the_registry_says(monkeypatch):
    monkeypatch.delenv("JAGGEDPERF_PLUGINS", raising=False)
    if importlib.util.find_spec("helion") is not None:
        pytest.skip("with helion installed, list asks torch whether a CUDA device runs it")
    done = _fresh("import sys; from jaggedperf.cli import main; code = main(['list', '--op', 'jagged_sum']); "
                  "print(sorted(m for m in ('torch', 'triton', 'jaggedperf.impls.registry') if m in sys.modules)); "
                  "sys.exit(code)")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "[]"
    assert any("segment_reduce" in line and "built-in" in line for line in lines)
    assert f"not available here: helion: {_catalogue.HELION_NOT_INSTALLED}" in done.stdout


def test_the_catalogue_is_the_registry():
    from jaggedperf.impls.helion_contenders import unavailable_reason

    registry = _catalogue.from_registry()
    if importlib.util.find_spec("helion") is None:
        assert registry == _catalogue.CATALOGUE, "python -m jaggedperf.cli._catalogue prints the registry's value"
        assert unavailable_reason() == _catalogue.HELION_NOT_INSTALLED
    else:  # helion's contenders registered or unavailable for another reason: the rest must agree
        def without_helion(ops):
            return tuple(dataclasses.replace(op, unavailable=(), implementations=tuple(
                i for i in op.implementations if i.name != "helion")) for op in ops)

        assert without_helion(registry) == without_helion(_catalogue.CATALOGUE)


def test_the_parsers_defaults_are_the_librarys():
    from jaggedperf import inputs
    from jaggedperf.cli import _defaults
    from jaggedperf.lab import runner, sweep
    from jaggedperf.lab.doctor import gather
    from jaggedperf.lab.results import compare, tables

    assert _defaults.DEFAULT_SEED == inputs.DEFAULT_SEED and _defaults.DISTRIBUTIONS == inputs.DISTRIBUTIONS
    assert _defaults.METRICS == tuple(tables.METRICS)
    assert _defaults.DEFAULT_BYTE_LIMIT == runner.DEFAULT_BYTE_LIMIT
    assert _defaults.SWEEP_TIMEOUT_S == sweep.DEFAULT_TIMEOUT_S
    assert _defaults.DOCTOR_COMPILE_BUDGET_S == gather.DEFAULT_COMPILE_BUDGET_S
    assert (_defaults.COMPARE_K, _defaults.COMPARE_MIN_REL) == (compare.K, compare.MIN_REL)


def test_an_unknown_flag_is_refused_by_its_commands_parser(capsys):
    from jaggedperf.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--itres", "5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: jaggedperf run ") and "jaggedperf run: error: unrecognized arguments: --itres 5" in err
    assert err.rstrip().endswith("(did you mean --iters?)")


def test_an_unknown_flag_far_from_every_known_one_gets_no_suggestion(capsys):
    from jaggedperf.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--xyzzy"])
    assert capsys.readouterr().err.rstrip().endswith("unrecognized arguments: --xyzzy")
