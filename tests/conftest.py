import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    # Tests never depend on a user's validation switch.
    monkeypatch.delenv("JAGGEDPERF_VALIDATE", raising=False)
    yield


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture
def sweep_plugin():
    """The module name of the sweep's test plugin (misbehaving implementations). It registers them in this
    process when imported (by the sweep); they are taken out again after the test, so that no other test
    meets an implementation that hangs."""
    import sys

    yield "lab.sweep_plugin"
    module = sys.modules.pop("lab.sweep_plugin", None)
    if module is not None:
        module.unregister()
