"""A repository script (scripts/*.py) loaded as a module for its tests, without touching ``sys.path``."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(relative: str):
    """The module of ``ROOT/relative``, registered under its file's stem (its dataclasses look it up there)."""
    path = ROOT / relative
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
