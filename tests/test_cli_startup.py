"""The command line starts fast without a GPU: ``--help`` of every command and ``--version`` build their parsers
without importing torch, Triton or the ops (``jaggedperf.cli._defaults``), in a fresh process within
HELP_LIMIT_S; the values the parsers show are the library's."""

import subprocess
import sys
import time

import pytest

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


@pytest.mark.timed
@pytest.mark.parametrize("argv", [["--help"], ["--version"], *([c, "--help"] for c in COMMANDS)],
                         ids=lambda argv: " ".join(argv))
def test_help_and_version_take_under_two_seconds(argv):
    start = time.monotonic()
    done = _fresh(f"import sys; from jaggedperf.cli import main; sys.exit(main({argv!r}))")
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert took < HELP_LIMIT_S, f"jaggedperf {' '.join(argv)} took {took:.2f} s (limit {HELP_LIMIT_S} s)"


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
