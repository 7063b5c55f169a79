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
    """``jaggedperf X (torch Y, triton Z, Python W)``: the versions a bug report needs."""
    import platform
    from importlib import metadata

    import torch

    try:
        ours = metadata.version("jaggedperf")
    except metadata.PackageNotFoundError:  # run from a source tree without pip install
        ours = "(not installed: from source)"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    return f"jaggedperf {ours} (torch {torch.__version__}, triton {triton_version}, Python {platform.python_version()})"


def _quiet_torch_noise() -> None:
    """torch logs a few warnings on every compile that say nothing about the measurement."""
    import logging

    for name in ("torch.fx._symbolic_trace",):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    from jaggedperf.cli._args import EXIT_INTERRUPTED

    try:
        args = build_parser().parse_args(argv)
        _quiet_torch_noise()
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:  # a command that measures says itself what it kept; this is before or after that
        print("interrupted: nothing was being measured; outputs are written whole or not at all", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
