"""Command line. Each subcommand lives in its own module exposing ``register(subparsers)``, which adds
its parser and sets ``handler`` (args -> exit code). Only this package prints."""

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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"jaggedperf.cli.{name}").register(sub)
    return parser


def _quiet_torch_noise() -> None:
    """torch logs a few warnings on every compile that say nothing about the measurement."""
    import logging

    for name in ("torch.fx._symbolic_trace",):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_torch_noise()
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
