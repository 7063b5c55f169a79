"""Command line. Each subcommand lives in its own module exposing ``register(subparsers)``, which adds
its parser and sets ``handler`` (args -> exit code). Only this package prints. The flags they share, and
the rules they keep, are in ``_args``; nothing a user types or interrupts ends in a traceback."""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in the order `jaggedperf --help` lists them.
COMMAND_MODULES = ("lab", "sweep", "doctor", "results")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaggedperf",
        description="Reproduce, measure and explain jagged reductions in eager PyTorch and under torch.compile.",
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"jaggedperf.cli.{name}").register(sub)
    return parser


def version_text() -> str:
    """``jaggedperf X (torch Y, triton Z, Python W)``: the versions a bug report needs, from the installed packages'
    metadata (importing torch to ask would cost seconds of every ``--help``)."""
    import platform
    from importlib import metadata

    def installed(name: str, missing: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return missing

    ours = installed("jaggedperf", "(not installed: from source)")  # a source tree without pip install
    torch_version = installed("torch", "none")
    triton_version = installed("triton", "none")
    if triton_version == "none":  # some CUDA builds of torch ship Triton as pytorch-triton
        triton_version = installed("pytorch-triton", "none")
    return f"jaggedperf {ours} (torch {torch_version}, triton {triton_version}, Python {platform.python_version()})"


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that a flag the command does not know is refused by that command's parser:
    its usage line, not the top level's, is what helps (``jaggedperf run --itres``)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        command = sub.choices[args.command]
        command.error(f"unrecognized arguments: {' '.join(extras)}{_did_you_mean(command, extras)}")
    return args


def _did_you_mean(command: argparse.ArgumentParser, extras: list[str]) -> str:
    """The command's flags closest to the unknown ones (``--itres``: ``--iters``), or nothing."""
    import difflib

    known = [flag for action in command._actions for flag in action.option_strings if flag.startswith("--")]
    close = [m for extra in extras if extra.startswith("--")
             for m in difflib.get_close_matches(extra.split("=", 1)[0], known, n=1)]
    return f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""


def main(argv: list[str] | None = None) -> int:
    from jaggedperf.cli._args import EXIT_INTERRUPTED

    try:
        args = parse(build_parser(), argv)
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:  # a command that measures says itself what it kept; this is before or after that
        print("interrupted: nothing was being measured; outputs are written whole or not at all", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
