"""Did you mean: the Python API's own errors for unknown names suggest the closest valid ones, in the CLI's
wording (one helper, ``jaggedperf.names``), and the CLI says it once."""

from __future__ import annotations

import pytest

import jaggedperf
from jaggedperf.cli import main
from jaggedperf.impls.registry import get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import grid, modes
from jaggedperf.names import unknown_message


def test_the_message_names_the_closest_and_lists_all():
    assert unknown_message("mode", "eagr", ["eager", "graph"]) == (
        "unknown mode 'eagr'; did you mean 'eager'? (valid: eager, graph)")
    assert unknown_message("op", "zzz", ["jagged_mean"]) == "unknown op 'zzz' (valid: jagged_mean)"
    assert unknown_message("op", "x", []) == "unknown op 'x' (valid: (none))"


@pytest.mark.parametrize("call,error,message", [
    (lambda: get_op("jagged_maen"), KeyError, "unknown op 'jagged_maen'; did you mean 'jagged_mean'"),
    (lambda: get_implementation("jagged_mean", "jaggedpref"), KeyError,
     "unknown implementation 'jaggedpref' of jagged_mean; did you mean 'jaggedperf"),
    (lambda: modes.check_modes(["eager", "compile:defualt"]), ValueError,
     "unknown mode 'compile:defualt'; did you mean 'compile:default'"),
    (lambda: grid.expand("seeed"), ValueError, "unknown preset 'seeed'; did you mean 'seed'"),
    (lambda: grid.expand("seed", seqlne=[3]), ValueError, "unknown axis 'seqlne'; did you mean 'seqlen'"),
    (lambda: jaggedperf.bench(["sum_paded"], Case(2, 1, 3, 0.5), device="cpu"), KeyError,
     "did you mean 'sum_padded'"),
    (lambda: jaggedperf.bench(["sum_padded"], Case(2, 1, 3, 0.5), modes="compile:max-autotun", device="cpu"),
     ValueError, "did you mean 'compile:max-autotune'"),
])
def test_the_python_api_says_did_you_mean(call, error, message):
    with pytest.raises(error) as exc:
        call()
    assert message in exc.value.args[0] and "(valid: " in exc.value.args[0]


def test_the_cli_says_it_once(capsys):
    assert main(["run", "--B", "8", "--M", "3", "--seqlen", "9", "--sparsity", "0.5", "--impls", "jaggedpref",
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("did you mean") == 1 and "Traceback" not in err
