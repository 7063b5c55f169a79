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
  (``jaggedperf.njt_autograd``); an output that AOTAutograd returns detached although it aliases an input through an NJT's
  view ops is given back its edge (``joining.repair``);
- aliasing between NJT arguments is eager mode's (``q is k`` inside ``fn`` when the caller passed one NJT twice),
  an output that is an argument is that argument's object, and one NJT in several places of the output is one
  object;
- B, the total length and the seqlens do not recompile (unless ``dynamic=False``): the ragged sizes cross marked
  dynamic; the max_seqlen ``n`` as the size ``n`` (what torch.compile on the NJT sees: a max_seqlen of 0, 1 and more
  take a graph each, as there), the min_seqlen as ``n + 2`` (never 0 or 1, the sizes Dynamo specialises: a batch
  whose min_seqlen is 0 and one whose min_seqlen is not take two graphs, where torch.compile takes up to three;
  a function reading the ``_min_seqlen`` property, which Dynamo answers only from a graph input's size, fails once
  and from then on its min_seqlen crosses as ``n``, up to three graphs as there); under ``dynamic=False`` the seqlens
  still cross marked dynamic, as torch.compile on the NJT sees them (its constructor marks them): one graph for the
  max seqlens above 1, not one per (min, max) pair;
- one compiled region per call signature (pytree structure and layout), each its own code object, so each guards
  only its flat arguments, as ``fn`` compiled on plain tensors does; a graph that only rebuilds NJTs nobody uses
  (a function returning its inputs) is not compiled at all (``backend``);
- each region is compiled whole (``fullgraph=True``; ``backend`` says why): a function that breaks the graph on the
  components goes to ``torch.compile(fn)``; one that reads the lengths as Python numbers (``nt.unbind()``,
  ``offsets.tolist()``: the seed's ``unbind_mean``) traces, one graph for each B;
- a data-dependent read of a seqlen an NJT argument does not cache (a softmax over the ragged dim) makes the boundary
  compute it before crossing, a host read as in eager mode, which caches it on the NJT too; where a function still
  fails on data-dependent values, it is compiled again, and from then on called, with Dynamo capturing scalar
  outputs and dynamic output shapes (then with the fake offsets' own ragged sizes, not the regions' below);
- ``fn`` modifying an NJT argument in place where autograd records it (the NJT requires grad, or the change does)
  is found while Dynamo traces, before any data changes, and that signature goes to ``torch.compile(fn)``, which
  records the change on the caller's NJT (across the boundary it would reach only the crossing alias's history); a
  change autograd does not record writes through into the caller's values, as in eager mode;
- in a backward that builds a graph (``create_graph=True``) the gradients keep their history, so a gradient penalty
  reaches the compiled backward and raises as torch.compile's does, never dropped;
- a call that Dynamo traces (the caller is compiled too, by torch.compile or ``compile``) is ``fn``'s, inlined
  into the caller's graph as Dynamo inlines a nested torch.compile'd function (with ``fullgraph=True``, a graph break
  in ``fn`` raises there as it does); the module wrapper's attributes are torch.compile's OptimizedModule's: set
  and deleted on the original module, which the regions traced, so a change recompiles them as Dynamo's guards
  recompile torch.compile's frame;
- never worse than torch.compile in outcome: a call signature whose compile or run on the components raises (after
  the retries that apply, each setting tried once) goes to ``torch.compile(fn)`` from then on, decided on its first failure, with one
  ``BoundaryFallbackWarning`` naming the reason; an error torch.compile(fn) raises too is raised as it raises it.
  So does an NJT that cannot cross: one with ``lengths`` (holes), or ragged in a dim other than 1. A ``ValueError``
  or ``TypeError`` the compiled code raises as it runs (a jagged op's check of its offsets) is the caller's: raised
  as eager mode raises it, with no fallback. Past Dynamo's recompile limit (a region recompiles where ``fn``'s frame
  does) a call runs ``fn`` as torch.compile then does, or raises as it does under ``fullgraph=True``; no more graphs;
- the NJTs rebuilt inside have ragged sizes of the region's own (``region``): a symbol equal to
  itself alone and at least 2, as a nested int compares, so ops that compare a ragged size with a size (layer_norm, a
  mean broadcast back) compile on the components with no guard on it, where Dynamo could not build that guard on the
  fake offsets' symbolic one; it multiplies by a symbolic row stride too, so a feature width that changed (automatic
  dynamic shapes) or ``dynamic=True`` keeps one graph over the widths, as torch.compile on the NJT does.
"""

from jaggedperf.boundary.function import BoundaryFallbackWarning, BoundaryFunction, compile
from jaggedperf.boundary.module import BoundaryModule

__all__ = ["BoundaryFunction", "BoundaryModule", "BoundaryFallbackWarning", "compile"]
