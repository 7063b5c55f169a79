"""One grammar for every command: walks every subcommand's parser (``build_parser``) so that a new command,
or a new flag on an old one, cannot drift from the others. Then the parts of the grammar that need a parse:
lists by commas or spaces, ranges, old spellings, tritonbench's flags, did-you-mean, --version."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import pytest

from jaggedperf.cli import build_parser, main
from jaggedperf.cli._args import ListAction

# The list flags: wherever a command has one of these dests, it is a ListAction (commas or spaces).
LIST_DESTS = {"impls", "modes", "metrics", "B", "M", "seqlen", "sparsity", "dtype", "distribution", "seed"}
# Old spellings that documented commands use: still accepted, hidden from --help.
HIDDEN_ALIASES = [("sweep", "--out", "json"), ("plot", "-o", "plots_dir"), ("plot", "--out", "plots_dir"),
                  ("doctor", "--trace", "trace_dir"), ("doctor", "--mode", "modes"), ("run", "--mode", "modes"),
                  ("repro", "--mode", "modes"), ("sweep", "--mode", "modes")]
MEASURING = ("run", "repro", "doctor", "sweep")


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def stem(text: str) -> str:
    """A help text's wording family: what comes before its first ':', ';' or '(' (the command's default and
    details follow)."""
    return re.split(r"[:;(]", text)[0].strip()


def test_the_same_dest_has_the_same_flag_type_and_help_in_every_command():
    seen: dict[str, dict[str, tuple]] = defaultdict(dict)
    by_spelling: dict[str, set[str]] = defaultdict(set)
    for name, parser in commands().items():
        for a in options(parser):
            if a.help == argparse.SUPPRESS:  # an old spelling (HIDDEN_ALIASES), kept as it was
                continue
            for spelling in a.option_strings:
                by_spelling[spelling].add(a.dest)
            seen[a.dest][name] = (tuple(a.option_strings), type(a).__name__, a.type, a.nargs, a.const,
                                  tuple(a.choices or ()), stem(a.help or ""))
    shared = {dest: per for dest, per in seen.items() if len(per) > 1}
    assert {"op", "impls", "modes", "json", "device", "flush_l2", "dtype", "B", "plugin", "timeout"} <= set(shared)
    for dest, per in shared.items():
        forms = set(per.values())
        assert len(forms) == 1, f"--{dest} differs between commands: {per}"
    clashes = {s: dests for s, dests in by_spelling.items() if len(dests) > 1}
    assert not clashes, f"one spelling, several meanings: {clashes}"


def test_every_flag_is_spelled_alike_and_states_its_default():
    for name, parser in commands().items():
        for a in options(parser):
            for spelling in a.option_strings:
                assert re.fullmatch(r"--[a-zA-Z][a-z0-9]*(-[a-z0-9]+)*|-[a-z]", spelling), (name, spelling)
            if a.help == argparse.SUPPRESS or isinstance(a, argparse._VersionAction):
                continue
            assert a.help, (name, a.option_strings)
            if a.default not in (None, False, [], argparse.SUPPRESS) and not isinstance(a, argparse._StoreTrueAction):
                assert "default" in a.help, f"{name} {a.option_strings[0]}: default {a.default!r} not in its help"
            if a.dest in LIST_DESTS:
                assert isinstance(a, ListAction) and a.nargs == "+", (name, a.dest)


def test_old_spellings_are_hidden_aliases_of_the_new():
    for name, spelling, dest in HIDDEN_ALIASES:
        actions = [a for a in options(commands()[name]) if spelling in a.option_strings]
        assert [a.dest for a in actions] == [dest] and actions[0].help == argparse.SUPPRESS, (name, spelling)
        assert spelling not in commands()[name].format_help().split(), (name, spelling)


def test_l2_flush_is_one_flag_with_each_commands_default_in_its_help():
    for name, default, words in (("run", True, "default: flush,"), ("doctor", False, "default: no flush,")):
        (a,) = [a for a in options(commands()[name]) if a.dest == "flush_l2"]
        assert isinstance(a, argparse.BooleanOptionalAction) and a.default is default and words in a.help
        assert set(a.option_strings) == {"--flush-l2", "--no-flush-l2"}
    p = build_parser()
    assert p.parse_args(["doctor", "--flush-l2"]).flush_l2 and not p.parse_args(["run", "--no-flush-l2"]).flush_l2


@pytest.mark.parametrize("command", MEASURING)
def test_lists_by_commas_or_spaces_and_ranges_everywhere(command, tmp_path):
    head = {"run": ["run"], "repro": ["repro"], "doctor": ["doctor"], "sweep": ["sweep", "--json", "x.jsonl"]}[command]
    p = build_parser()
    by_commas = p.parse_args([*head, "--impls", "a,b", "--modes", "eager,graph", "--dtype", "bf16,fp32"])
    by_spaces = p.parse_args([*head, "--only", "a", "b", "--mode", "eager", "graph", "--dtype", "bf16", "fp32"])
    for args in (by_commas, by_spaces):
        assert (args.impls, args.modes, args.dtype) == (["a", "b"], ["eager", "graph"], ["bfloat16", "float32"])
    if command != "repro":  # repro's cases are the seed's
        args = p.parse_args([*head, "--seqlen", "100:300:100", "500", "--sparsity", "0.1,0.5", "--B", "8"])
        assert (args.seqlen, args.sparsity, args.B) == ([100, 200, 300, 500], [0.1, 0.5], [8])


def test_tritonbench_flags_are_accepted_where_they_mean_the_same():
    args = build_parser().parse_args(["run", "--op", "jagged_sum", "--only", "sum_padded", "--baseline", "sum_padded",
                                      "--metrics", "latency,speedup", "--csv", "--B", "8"])
    assert (args.op, args.impls, args.baseline, args.metrics, args.csv) == (
        "jagged_sum", ["sum_padded"], "sum_padded", ["latency", "speedup"], "-")
    for name in MEASURING + ("list",):
        dests = {a.dest for a in options(commands()[name])}
        assert {"op", "impls", "plugin"} <= dests, name
        assert "--only" in [s for a in options(commands()[name]) if a.dest == "impls" for s in a.option_strings]


@pytest.mark.parametrize("argv,message", [
    (["run", "--B", "8", "--M", "3", "--seqlen", "9", "--sparsity", "0.5", "--impls", "jaggedpref"],
     "unknown implementation 'jaggedpref' of jagged_mean; did you mean 'jaggedperf'"),
    (["run", "--B", "8", "--M", "3", "--seqlen", "9", "--sparsity", "0.5", "--modes", "compile:defualt"],
     "unknown mode 'compile:defualt'; did you mean 'compile:default'"),
    (["list", "--op", "jagged_maen"], "unknown op 'jagged_maen'; did you mean 'jagged_mean'"),
    (["doctor", "--mode", "eager"], "unknown mode 'eager'"),
    (["run", "--preset", "seeed"], "unknown preset 'seeed'; did you mean 'seed'"),
    (["run", "--preset", "seed", "--metrics", "latncy"], "unknown metric 'latncy'; did you mean 'latency'"),
    (["run", "--preset", "seed", "--baseline", "sum_pad"], "did you mean 'sum_padded'"),
])
def test_unknown_names_say_did_you_mean_in_one_line(argv, message, capsys):
    try:
        code = main([*argv, *(["--device", "cpu"] if argv[0] != "list" else [])])
    except SystemExit as exc:  # argparse's own refusal of a flag's value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert re.fullmatch(r"jaggedperf \S+( \(not installed: from source\))? \(torch .*, triton .*, Python .*\)\n",
                        capsys.readouterr().out)
