"""Names a user types (op, implementations, modes, baseline, metrics, presets, distributions): checked once,
after the plugins are imported (a plugin may register implementations and ops), with a "did you mean" for
a near miss (``jaggedperf.names``, whose wording the lab's own errors share). The lab checks the same names
again; these checks come first, after the plugins, and cover the names the lab does not check (metrics, presets)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from jaggedperf.cli._defaults import METRICS
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.plugins import import_plugins, plugin_names
from jaggedperf.names import unknown_message


class UnknownName(ValueError):
    """A name that is not one of the valid ones; the message names the closest valid ones and lists them all."""


def check_names(kind: str, names: Iterable[str], valid: Sequence[str], where: str = "") -> list[str]:
    """``names`` in order when each is in ``valid``.

    Raises:
        UnknownName: the first name that is not (with its closest matches).
    """
    names = list(names)
    for name in names:
        if name not in valid:
            raise UnknownName(unknown_message(kind, name, valid, where))
    return names


def choice(kind: str, valid: Sequence[str]):
    """An argparse ``type`` that accepts one of ``valid`` (read when called: a list that grows, such as
    ``grid.PRESETS``, is seen whole) and refuses anything else with a "did you mean"."""

    def parse(text: str) -> str:
        try:
            return check_names(kind, [text.strip()], list(valid))[0]
        except UnknownName as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = kind  # argparse names the type in its messages
    return parse


@dataclass(frozen=True)
class Selection:
    """What a command was asked to measure, every name checked: the op, its implementations, the modes, the
    implementation speedups are taken against (None: each against its own eager), the metrics to show
    (None: every one measured), and the plugin modules imported to find them."""

    op: str
    impls: list[str]
    modes: list[str]
    baseline: str | None = None
    metrics: list[str] | None = None
    plugins: tuple[str, ...] = ()


def select(args: argparse.Namespace, *, default_impls=None, default_modes: Sequence[str] = (),
           allowed_modes: Sequence[str] = modes_mod.MODES, known: Mapping[str, Sequence[str]] | None = None) -> Selection:
    """Import the plugins (``--plugin``, ``$JAGGEDPERF_PLUGINS``), then check the names the command was given.

    Args:
        args: the parsed flags; reads ``op``, ``impls``, ``modes`` and, where the command has them,
            ``plugin``, ``baseline`` and ``metrics``.
        default_impls: op -> the implementations when ``--impls`` is not given (None: all of the op's).
        default_modes: the modes when ``--modes`` is not given.
        allowed_modes: the modes this command can take (the doctor's: compiled ones only).
        known: op -> its implementations, where the caller knows them without the registry (``list``'s catalogue,
            which spares the import of torch); None: the registry's, after the plugins (which may add some).

    Raises:
        jaggedperf.lab.plugins.PluginError: a plugin could not be imported.
        UnknownName: an unknown op, implementation, mode, baseline or metric.
    """
    plugins = tuple(plugin_names(getattr(args, "plugin", None) or ()))
    import_plugins(plugins)
    if known is None:
        from jaggedperf.impls.registry import OPS, implementation_names  # after the plugins: they may add ops

        known = {name: implementation_names(name) for name in OPS}
    op = check_names("op", [args.op], sorted(known))[0]
    valid_impls = list(known[op])
    impls = check_names("implementation", args.impls or (default_impls or known.__getitem__)(op), valid_impls,
                        f"of {op}")
    modes = check_names("mode", getattr(args, "modes", None) or list(default_modes), list(allowed_modes))
    baseline = getattr(args, "baseline", None)
    if baseline is not None:
        check_names("implementation", [baseline], valid_impls, f"of {op}")
        if baseline not in impls:  # the baseline must be measured to be divided by
            impls = [baseline, *impls]
    metrics = getattr(args, "metrics", None)
    if metrics is not None:
        check_names("metric", metrics, list(METRICS))
    return Selection(op, list(dict.fromkeys(impls)), list(dict.fromkeys(modes)), baseline, metrics, plugins)
