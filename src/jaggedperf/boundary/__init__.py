"""compile: torch.compile for functions of jagged NestedTensors, with the NJTs taken apart at the boundary.

A compiled function that takes a jagged NestedTensor (NJT) pays, on every call, Dynamo's guards on the NJT and the
compiled runtime's subclass handling: ~250-300 µs a call on an H200 host under torch 2.11, less from torch 2.13
(``docs/performance.md``, the model, 6-7). The same computation compiled on the NJT's components costs what any
dense compiled call costs. ``compile`` makes that the default for any function or module:

- outside (``crossing``), each NJT argument, anywhere in the args/kwargs pytree, crosses as its values, its offsets
  and its cached min/max seqlens, described by a layout code; the same NJT object twice crosses once;
- inside (``region``), the region torch.compile traces rebuilds each NJT (one call of the NJT view op), calls
  ``fn`` on them, and takes its outputs apart into records (``parts``): an NJT into its parts, a tensor with its
  traced ``requires_grad``, an output that is an input NJT into that input's index;
- outside again (``joining``), the records become what ``fn`` returned eagerly: the caller's own object for an
  input returned, an NJT over the output's offsets with its cached seqlens, a tensor with eager mode's autograd
  state.

Invariants (what the tests in ``tests/boundary`` hold it to, PyTorch's NJT OpInfo samples among them):
- results, gradients, ``requires_grad``, ``grad_fn`` presence and output NJTs' cached seqlens are eager mode's
  (and torch.compile's). Where autograd must flow, an NJT crosses in and out through one autograd node each
  (``differentiable``); an output that AOTAutograd returns detached although it aliases an input through an NJT's
  view ops is given back its edge (``joining.repair``);
- aliasing between NJT arguments is eager mode's (``q is k`` inside ``fn`` when the caller passed one NJT twice),
  and an output that is an argument is that argument's object;
- B, the total length and the seqlens do not recompile (unless ``dynamic=False``): the ragged sizes cross marked
  dynamic; the max_seqlen ``n`` as the size ``n`` (what torch.compile on the NJT sees: a max_seqlen of 0, 1 and more
  take a graph each, as there), the min_seqlen as ``n + 2`` (never 0 or 1, the sizes Dynamo specialises: a batch
  whose min_seqlen is 0 and one whose min_seqlen is not take two graphs, where torch.compile takes up to three);
- one compiled region per call signature (pytree structure and layout), each its own code object, so each guards
  only its flat arguments, as ``fn`` compiled on plain tensors does; a graph that only rebuilds NJTs nobody uses
  (a function returning its inputs) is not compiled at all (``backend``);
- a function that reads the lengths as Python numbers (``nt.unbind()``, ``offsets.tolist()``: the seed's
  ``unbind_mean``) cannot be traced on symbolic components: it is compiled again, and from then on called, with
  Dynamo capturing scalar outputs and dynamic output shapes, so the lengths become unbacked symbols (and the ragged
  sizes symbolic: unbacked symbols do not combine with the constant ones below);
- never worse than torch.compile in outcome: a call signature whose compile or run on the components raises (after
  the retries that apply, each setting tried once) goes to ``torch.compile(fn)`` from then on, decided on its first failure, with one
  ``BoundaryFallbackWarning`` naming the reason; an error torch.compile(fn) raises too is raised as it raises it.
  So does an NJT that cannot cross: one with ``lengths`` (holes), or ragged in a dim other than 1. A ``ValueError``
  or ``TypeError`` the compiled code raises as it runs (a jagged op's check of its offsets) is the caller's: raised
  as eager mode raises it, with no fallback;
- before torch 2.15 the NJTs rebuilt inside have constant ragged sizes (``region``), so ops that compare a ragged
  size with an int (layer_norm) compile on the components, where Dynamo could not build that guard.
"""

from jaggedperf.boundary.function import BoundaryFallbackWarning, BoundaryFunction, BoundaryModule, compile

__all__ = ["BoundaryFunction", "BoundaryModule", "BoundaryFallbackWarning", "compile"]
