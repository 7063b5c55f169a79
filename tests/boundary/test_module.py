"""jaggedperf.compile of an nn.Module: the wrapper's attributes, modes and pickling are torch.compile's
OptimizedModule's, and what is changed through it reaches the next call, compiled again as torch.compile compiles."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import jaggedperf
from jaggedperf.boundary import BoundaryModule
from tests.boundary.njts import assert_close, make_njt


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)
        self.scale = 1.0
        self.shift = 0.5

    def forward(self, nt):
        return self.proj(nt) * self.scale + getattr(self, "shift", 0.0)


def _set_scale(target):
    target.scale = 3.0


def _replace_submodule(target):
    target.proj = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())


def _delete_shift(target):
    del target.shift


CHANGES = {"hyper-parameter": _set_scale, "submodule": _replace_submodule, "deleted": _delete_shift}


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_attribute_changed_through_the_wrapper_is_the_modules_and_recompiles_as_torch_compile(change):
    # torch.compile's OptimizedModule sets and deletes attributes it does not own on the original module; a wrapper
    # keeping them served the old ones, silently. The region traced the module, so Dynamo's guards on its attributes
    # must recompile it, never serve the graph traced with the old value.
    nt, _ = make_njt(4, 5, requires_grad=True)
    runs = {}
    for name, compile_ in (("torch.compile", torch.compile), ("jaggedperf.compile", jaggedperf.compile)):
        torch._dynamo.reset()
        torch.manual_seed(0)
        module = _Scaled()
        eager = _Scaled()
        eager.load_state_dict(module.state_dict())
        counter = CompileCounterWithBackend("aot_eager")
        compiled = compile_(module, backend=counter)
        assert_close(compiled(nt), eager(nt))
        torch.manual_seed(1)  # the replaced submodule's weights: the same in both
        CHANGES[change](compiled)
        torch.manual_seed(1)
        CHANGES[change](eager)
        assert not ({"scale", "proj", "shift"} & set(vars(compiled))), "the change stayed on the wrapper"
        outputs, grads = [], []
        for run in (eager, compiled):
            out = run(nt)
            out.values().pow(2).sum().backward()
            outputs.append(out)
            grads.append([nt.grad.values().clone()] + [p.grad.clone() for p in run.parameters()])
            nt.grad = None
        assert_close(outputs[1], outputs[0])
        for got, expected in zip(grads[1], grads[0], strict=True):
            assert_close(got, expected)
        runs[name] = counter.frame_count
    assert runs["jaggedperf.compile"] == runs["torch.compile"] == 2


def _observe(compile_) -> list:
    """What a script of attribute writes, deletes, modes and registrations through a compiled module leaves where."""
    torch.manual_seed(0)
    module = _Scaled()
    compiled = compile_(module, backend="aot_eager")
    seen = []
    compiled.added = 5
    seen += [module.added, "added" in vars(compiled)]
    del compiled.added
    seen.append(hasattr(module, "added"))
    with pytest.raises(AttributeError):
        del compiled.never_set
    compiled.weight2 = torch.nn.Parameter(torch.ones(2))
    seen.append("weight2" in module._parameters)
    module.eval()
    seen.append(compiled.training)  # the original's mode, whichever was set
    compiled.train()
    seen += [module.training, module.proj.training]
    compiled.training = False  # the original's flag alone, as nn.Module's attribute would be
    seen += [module.training, module.proj.training, "training" in vars(compiled)]
    compiled.eval()
    seen += [module.training, module.proj.training]
    compiled.register_buffer("mine", torch.ones(1))  # nn.Module's own state: the wrapper's
    seen += ["mine" in compiled._buffers, hasattr(module, "mine"), list(compiled.state_dict())]
    compiled.forward = compiled.forward  # patched over a class attribute: the wrapper's
    seen += ["forward" in vars(compiled), "forward" in vars(module)]
    seen += ["scale" in dir(compiled), "_orig_mod" in dir(compiled), compiled._orig_mod is module]
    seen.append(len(compile_(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.ReLU()), backend="aot_eager")))
    with pytest.raises(TypeError, match="_Scaled does not support len"):
        len(compiled)
    with pytest.raises(AttributeError, match="has no deleter"):
        del compiled.training
    return seen


def test_the_wrapper_owns_and_forwards_the_attributes_optimized_module_does():
    assert _observe(jaggedperf.compile) == _observe(torch.compile)


def test_a_compiled_module_is_true_as_its_module():
    # OptimizedModule takes its truth from __len__, which raises for a module that has no length (torch 2.13;
    # pytorch#196292 gives it the original's truth): the wrapper answers as the original, as eager mode does
    assert bool(jaggedperf.compile(torch.nn.Linear(2, 2))) is True
    assert bool(jaggedperf.compile(torch.nn.Sequential())) is bool(torch.nn.Sequential()) is False


def test_a_compiled_module_pickles_as_its_module_and_compiles_again():
    # the regions are code made at run time: pickling a module that ran failed on them, where torch.compile's
    # OptimizedModule pickles as its module and its compile's arguments
    torch.manual_seed(0)
    compiled = jaggedperf.compile(_Scaled(), backend="aot_eager")
    nt, _ = make_njt(4, 5)
    expected = compiled(nt)
    compiled.scale = 2.0
    expected = compiled(nt)
    buffer = io.BytesIO()
    torch.save(compiled, buffer)
    buffer.seek(0)
    for restored in (pickle.loads(pickle.dumps(compiled)), torch.load(buffer, weights_only=False)):
        assert isinstance(restored, BoundaryModule) and restored._orig_mod is not compiled._orig_mod
        assert restored.scale == 2.0 and not restored.boundary.regions
        assert restored.boundary.compile_kwargs == compiled.boundary.compile_kwargs
        assert list(restored.state_dict()) == list(compiled.state_dict()) == ["_orig_mod.proj.weight",
                                                                              "_orig_mod.proj.bias"]
        assert_close(restored(nt), expected)
        assert restored.boundary.regions and restored.boundary.last_fallback is None
