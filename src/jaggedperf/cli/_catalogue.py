"""The built-in ops and their implementations as ``jaggedperf list`` shows them, written here so that a plain
``list`` answers without importing torch (seconds of start-up; the registry's modules import it): the registry
(``jaggedperf.impls``) is read instead wherever it could say something this cannot, that is with a plugin (which
registers more) or with helion installed (whether its contenders run depends on a CUDA device, which only torch can
tell). ``tests/test_cli_startup.py`` holds ``CATALOGUE`` equal to the registry; after a change there,
``python -m jaggedperf.cli._catalogue`` prints its new value to paste here."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# helion_contenders.unavailable_reason() where the package is missing (held equal by the same test)
HELION_NOT_INSTALLED = "the helion package is not installed (pip install helion)"


@dataclass(frozen=True)
class Listed:
    """One implementation of an op, as ``list`` shows it."""

    name: str
    takes: str  # "njt" or "dense"
    pads: bool
    description: str
    origin: str = "built-in"  # or the plugin module that registered it


@dataclass(frozen=True)
class ListedOp:
    """One op, its implementations in registration order, and the optional ones that cannot run here, with why."""

    name: str
    description: str
    implementations: tuple[Listed, ...]
    unavailable: tuple[tuple[str, str], ...] = ()

    def implementation_names(self) -> list[str]:
        return [impl.name for impl in self.implementations]


HELION = (("helion", HELION_NOT_INSTALLED),)  # the ops with a helion contender, where it is not installed


CATALOGUE: tuple[ListedOp, ...] = (
    ListedOp("jagged_mean", "mean over each sequence's rows: (B, M)", (
        Listed("unbind_mean", "njt", False, "seed #1: unbind the NJT, torch.mean each sequence, cat"),
        Listed("nanmean_padded", "njt", True, "seed #2: pad with NaN to seqlen, torch.nanmean"),
        Listed("sum_padded", "njt", True, "seed #3: pad with 0 to seqlen, torch.sum, divide by lengths"),
        Listed("njt_mean", "njt", False, "NestedTensor .mean(dim=1) over the ragged dim"),
        Listed("segment_reduce", "dense", False, "torch.segment_reduce(values, 'mean', offsets=offsets)"),
        Listed("jaggedperf", "dense", False, "jaggedperf.ops.jagged_mean(values, offsets, max_seqlen=…): balanced "
                                             "Triton kernels (pure torch on the CPU)"),
        Listed("jaggedperf_njt", "njt", False, "jaggedperf.ops.jagged_mean(nt): the same op on the seed's "
                                               "NestedTensor input"),
    ), HELION),
    ListedOp("rec_block", "embedding lookup of jagged ids → mean per sequence → Linear(M, 4M) → ReLU → "
                          "Linear(4M, M): (B, M)", (
        Listed("njt_mean", "njt", False, "F.embedding on the NJT of ids, NestedTensor .mean(dim=1), MLP"),
        Listed("sum_padded", "njt", True, "the seed's way: gather, pad the rows with 0 to seqlen, sum, divide by "
                                          "lengths, MLP"),
        Listed("segment_reduce", "dense", False, "gather, torch.segment_reduce(rows, 'mean', offsets=offsets), MLP"),
        Listed("index_add", "dense", False, "gather, index_add the rows into (B, M) by segment id, divide by "
                                            "lengths, MLP"),
        Listed("jaggedperf", "dense", False, "gather, jaggedperf.ops.jagged_mean(rows, offsets, max_seqlen=…), MLP"),
        Listed("jaggedperf_njt", "njt", False, "F.embedding on the NJT of ids, jaggedperf.ops.jagged_mean(nt), MLP"),
    )),
    ListedOp("jagged_sum", "sum over each sequence's rows: (B, M)", (
        Listed("unbind_sum", "njt", False, "unbind the NJT, torch.sum each sequence, cat"),
        Listed("sum_padded", "njt", True, "pad with 0 to seqlen (_jagged_to_padded_dense_forward), torch.sum"),
        Listed("njt_sum", "njt", False, "NestedTensor .sum(dim=1) over the ragged dim"),
        Listed("segment_reduce", "dense", False, "torch.segment_reduce(values, 'sum', offsets=offsets)"),
        Listed("jaggedperf", "dense", False, "jaggedperf.ops.jagged_sum(values, offsets, max_seqlen=…)"),
        Listed("jaggedperf_njt", "njt", False, "jaggedperf.ops.jagged_sum(nt) on the NestedTensor"),
    ), HELION),
    ListedOp("jagged_softmax", "softmax of each sequence along its rows, per column: (total_len, M)", (
        Listed("unbind_softmax", "njt", False, "unbind the NJT, torch's softmax on each sequence, cat"),
        Listed("softmax_padded", "njt", True, "pad to seqlen, masked dense softmax, back to jagged (tritonbench's "
                                              "padded)"),
        Listed("njt_softmax", "njt", False, "torch.softmax(nt, dim=1): NestedTensor softmax over the ragged dim"),
        Listed("jaggedperf", "dense", False, "jaggedperf.ops.jagged_softmax(values, offsets, max_seqlen=…): Triton "
                                             "kernels (pure torch on the CPU)"),
        Listed("jaggedperf_njt", "njt", False, "jaggedperf.ops.jagged_softmax(nt): NJT in, NJT out"),
    ), HELION),
    ListedOp("jagged_layer_norm", "layer norm of each sequence over its len × M elements: (total_len, M)", (
        Listed("unbind_layer_norm", "njt", False, "unbind the NJT, torch's layer_norm on each sequence, cat"),
        Listed("layer_norm_padded", "njt", True, "pad to seqlen, masked dense layer_norm, back to jagged "
                                                 "(tritonbench's padded)"),
        Listed("njt_layer_norm", "njt", False, "F.layer_norm(nt, nt.shape[1:]): NestedTensor layer norm over (j, M)"),
        Listed("jaggedperf", "dense", False, "jaggedperf.ops.jagged_layer_norm(values, offsets, max_seqlen=…): "
                                             "Triton kernels (pure torch on the CPU)"),
        Listed("jaggedperf_njt", "njt", False, "jaggedperf.ops.jagged_layer_norm(nt): NJT in, NJT out"),
    ), HELION),
)


def answers_here(plugins) -> bool:
    """Whether ``CATALOGUE`` is what the registry would say here: no plugin to import, and no helion installed."""
    return not plugins and importlib.util.find_spec("helion") is None


def from_registry() -> tuple[ListedOp, ...]:
    """What the registry (built-ins and any plugins imported) holds, in ``CATALOGUE``'s form (imports torch)."""
    from jaggedperf.impls.registry import OPS

    return tuple(ListedOp(op.name, op.description,
                          tuple(Listed(i.name, i.takes, i.pads, i.description, _origin(i.fn))
                                for i in op.implementations.values()),
                          tuple(op.unavailable.items()))
                 for op in OPS.values())


def _origin(fn) -> str:
    """"built-in" for jaggedperf's own implementations, else the module that registered it (a plugin)."""
    module = getattr(fn, "__module__", "") or ""
    return "built-in" if module.split(".")[0] == "jaggedperf" else module


if __name__ == "__main__":  # the registry's value, to paste above after a change there
    import pprint

    pprint.pprint(from_registry(), width=120)
