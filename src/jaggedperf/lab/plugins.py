"""Plugins: modules imported before cells are planned and run, so that they can register more
implementations with ``jaggedperf.impls.registry.implementation``. A sweep imports them in its own
process and in every worker. Named with ``--plugin MODULE`` or in ``$JAGGEDPERF_PLUGINS`` (comma-separated)."""

from __future__ import annotations

import importlib
import os
from typing import Iterable, Mapping

PLUGINS_ENV = "JAGGEDPERF_PLUGINS"


class PluginError(Exception):
    """A plugin module that could not be imported (one line: the module and why)."""


def plugin_names(explicit: Iterable[str] = (), environ: Mapping[str, str] = os.environ) -> list[str]:
    """The plugin modules to import: ``explicit``, then those in ``$JAGGEDPERF_PLUGINS``, each once.

    Args:
        explicit: module names given on the command line (``--plugin``).
        environ: where ``$JAGGEDPERF_PLUGINS`` is read (comma-separated).

    Returns:
        Module names, in order, without repeats or blanks.
    """
    from_env = [part.strip() for part in environ.get(PLUGINS_ENV, "").split(",")]
    return list(dict.fromkeys(name for name in (*explicit, *from_env) if name))


def import_plugins(names: Iterable[str]) -> None:
    """Import each plugin module (which registers its implementations as it is imported).

    Args:
        names: module names, importable from ``sys.path``.

    Raises:
        PluginError: a module could not be imported (one line: the module and why).
    """
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a plugin's own error is the user's to see, in one line
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise PluginError(f"plugin {name!r} could not be imported: {type(exc).__name__}: {detail}") from exc
