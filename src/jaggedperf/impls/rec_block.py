"""rec_block: a small recommendation-style block, the whole model the boundary is for (not one op).

    out = Linear(4M, M)(ReLU(Linear(M, 4M)(mean over each sequence of table[ids])))    (B, M)

Its batch is a ``LookupBatch``: jagged ids into an embedding table (the case's lengths and offsets, as
for jagged_mean) plus the block's weights. Everything is drawn from the case's seed, on the device,
when the case's batch is made, outside any timed region: the same case gives the same ids and weights
on every run of one device type. The table has ``VOCABULARY`` rows of M values in the case dtype
(100 000 × 64 × 4 B = 25.6 MB at the seed's M); the MLP's weights are scaled by 1/√fan-in, its
biases by 0.1, so activations stay of order 1 in every dtype. The weights are marked static addresses, as an
nn.Module's parameters are to torch.compile (``make_lookup_batch``). An empty sequence pools to NaN (0/0,
as torch.mean), which the MLP carries into that sequence's output row.

The contenders differ in how they gather and pool (the MLP is the same ``F.linear``/``relu`` in all):
torch's NJT ops (``embedding`` on an NJT of ids, then ``.mean(dim=1)``), the seed's pad-then-reduce
(``_jagged_to_padded_dense_forward`` of the gathered rows, sum over the padded dim, divide by the
lengths: a mean over the valid rows), ``segment_reduce``, ``index_add``, and ours (``jagged_mean``
on the gathered rows' values/offsets with max_seqlen, and on the NJT that ``embedding`` returns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from jaggedperf import ops
from jaggedperf.impls.jagged_mean import native_launch
from jaggedperf.impls.reference import on_batch_device, segment_sums, segments
from jaggedperf.impls.registry import Op, implementation, register_op
from jaggedperf.inputs import Case, make_offsets

VOCABULARY = 100_000  # embedding rows; ids are uniform over them
HIDDEN_FACTOR = 4  # the MLP's hidden width is HIDDEN_FACTOR·M
BIAS_SCALE = 0.1


@dataclass(frozen=True)
class LookupBatch:
    """Jagged ids into ``table`` and the block's weights, all on one device.

    ``values``/``offsets`` are the jagged input (sequence b is ``values[offsets[b]:offsets[b+1]]``);
    the seqlens are host ints computed when the batch is made, so reading them needs no sync.
    """

    values: torch.Tensor  # (total_len,) int64 ids into table
    offsets: torch.Tensor  # (B+1,) int64
    max_seqlen: int
    min_seqlen: int
    padded_len: int  # what the padded contender pads to (the case's nominal seqlen)
    table: torch.Tensor  # (VOCABULARY, M), the case dtype
    w1: torch.Tensor  # (4M, M): Linear(M, 4M).weight
    b1: torch.Tensor  # (4M,)
    w2: torch.Tensor  # (M, 4M): Linear(4M, M).weight
    b2: torch.Tensor  # (M,)

    @property
    def B(self) -> int:
        return self.offsets.numel() - 1

    @property
    def M(self) -> int:
        return self.table.shape[1]

    @property
    def total_len(self) -> int:
        return self.values.shape[0]

    @property
    def params(self) -> tuple[torch.Tensor, ...]:
        """What every implementation takes after the ids: (table, w1, b1, w2, b2)."""
        return (self.table, self.w1, self.b1, self.w2, self.b2)

    def lengths(self) -> torch.Tensor:
        return self.offsets.diff()

    def weight_nbytes(self) -> int:
        """Bytes of the MLP's weights and biases."""
        return sum(t.numel() * t.element_size() for t in (self.w1, self.b1, self.w2, self.b2))

    def padded_nbytes(self) -> int:
        """Bytes of the (B, padded_len, M) gathered rows the padded contender materialises."""
        return self.B * self.padded_len * self.M * self.table.element_size()

    def to_nested(self) -> torch.Tensor:
        """The ids as a (B, j) jagged NestedTensor, max/min seqlen cached."""
        return torch.nested.nested_tensor_from_jagged(self.values, self.offsets, min_seqlen=self.min_seqlen,
                                                      max_seqlen=self.max_seqlen)


def make_lookup_batch(case: Case, device: torch.device) -> LookupBatch:
    """The case's batch: its lengths (``inputs.make_lengths``, as for jagged_mean), ids and weights drawn
    on ``device`` from a generator seeded with ``case.seed``, in the case dtype.

    Args:
        case: the case (B, M, seqlen, sparsity, distribution, dtype, seed).
        device: where the batch lives.

    Returns:
        The batch.
    """
    device = torch.device(device)
    lengths, offsets = make_offsets(case)
    total = int(offsets[-1])
    gen = torch.Generator(device=device).manual_seed(case.seed)
    M, hidden, dtype = case.M, HIDDEN_FACTOR * case.M, case.torch_dtype

    def draw(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    ids = torch.randint(0, VOCABULARY, (total,), generator=gen, device=device, dtype=torch.int64)
    table = draw(VOCABULARY, M, scale=1.0)
    w1, b1 = draw(hidden, M, scale=1 / math.sqrt(M)), draw(hidden, scale=BIAS_SCALE)
    w2, b2 = draw(M, hidden, scale=1 / math.sqrt(hidden)), draw(M, scale=BIAS_SCALE)
    longest = int(lengths.max()) if case.B else 0
    shortest = int(lengths.min()) if case.B else 0
    for weight in (table, w1, b1, w2, b2):
        # The block's weights are a model's parameters, not its activations: torch.compile treats an nn.Module's
        # parameters as static addresses, so CUDA graphs (reduce-overhead, max-autotune) read them in place. Passed
        # as plain arguments they would be copied into the graph's own buffers on every call (the table alone is
        # 25.6 MB at the seed's M). Unguarded, as parameters are: a new tensor re-records the graph, no recompile.
        torch._dynamo.mark_static_address(weight, guard=False)
    return LookupBatch(ids, offsets.to(device), longest, shortest, max(case.seqlen, longest), table, w1, b1, w2, b2)


@on_batch_device
def reference(batch: LookupBatch, device: torch.device) -> torch.Tensor:
    """float64 on the batch's device (``impls.reference``): gather, per-sequence sums by index_add divided by the
    lengths (0/0 -> NaN), MLP."""
    table, w1, b1, w2, b2 = (t.detach().to(device, torch.float64) for t in batch.params)
    lengths, segment = segments(batch, device)
    sums = segment_sums(table[batch.values.to(device)], segment, batch.B)
    pooled = sums / lengths.unsqueeze(1).to(torch.float64)
    return torch.relu(pooled @ w1.T + b1) @ w2.T + b2


def must_move_bytes(batch: LookupBatch) -> int:
    """The block's floor: ids and offsets read once, the total_len gathered table rows read once (not the
    whole table), the MLP's weights read once, the (B, M) output written once. The hidden activations
    (B, 4M) are left out: a fused program keeps them on chip."""
    item = batch.table.element_size()
    ids = batch.values.numel() * batch.values.element_size() + batch.offsets.numel() * batch.offsets.element_size()
    return ids + batch.total_len * batch.M * item + batch.weight_nbytes() + batch.B * batch.M * item


def params(batch: LookupBatch) -> tuple[torch.Tensor, ...]:
    """``Op.params``: the batch's (table, w1, b1, w2, b2)."""
    return batch.params


register_op(Op("rec_block", reference, must_move_bytes,
               "embedding lookup of jagged ids → mean per sequence → Linear(M, 4M) → ReLU → Linear(4M, M): (B, M)",
               make_batch=make_lookup_batch, params=params))


def mlp(pooled: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """The block's head, the same in every contender: Linear(M, 4M) → ReLU → Linear(4M, M)."""
    return F.linear(F.relu(F.linear(pooled, w1, b1)), w2, b2)


def _padded_rows(rows, offsets, padded_len):
    return torch.ops.aten._jagged_to_padded_dense_forward(rows, [offsets], max_lengths=[padded_len], padding_value=0.0)


def _segment_ids(offsets, total_len):
    lengths = offsets.diff()
    return torch.repeat_interleave(torch.arange(lengths.shape[0], device=offsets.device), lengths,
                                   output_size=total_len)


# --- torch's ops ----------------------------------------------------------------------------


def njt_mean_plain(ids, offsets, padded_len, table, w1, b1, w2, b2):
    nt = torch.nested.nested_tensor_from_jagged(ids, offsets)
    return mlp(F.embedding(nt, table).mean(dim=1), w1, b1, w2, b2)


@implementation("rec_block", "njt_mean", takes="njt", plain=njt_mean_plain,
                description="F.embedding on the NJT of ids, NestedTensor .mean(dim=1), MLP")
def njt_mean(nt, table, w1, b1, w2, b2):
    return mlp(F.embedding(nt, table).mean(dim=1), w1, b1, w2, b2)


def sum_padded_plain(ids, offsets, padded_len, table, w1, b1, w2, b2):
    padded = _padded_rows(F.embedding(ids, table), offsets, padded_len)
    return mlp(padded.sum(dim=1) / offsets.diff().unsqueeze(1), w1, b1, w2, b2)


@implementation("rec_block", "sum_padded", takes="njt", pads=True, plain=sum_padded_plain,
                description="the seed's way: gather, pad the rows with 0 to seqlen, sum, divide by lengths, MLP")
def sum_padded(nt, padded_len, table, w1, b1, w2, b2):
    offsets = nt.offsets()
    padded = _padded_rows(F.embedding(nt.values(), table), offsets, padded_len)
    return mlp(padded.sum(dim=1) / offsets.diff().unsqueeze(1), w1, b1, w2, b2)


@implementation("rec_block", "segment_reduce", takes="dense",
                description="gather, torch.segment_reduce(rows, 'mean', offsets=offsets), MLP")
def segment_reduce(ids, offsets, table, w1, b1, w2, b2):
    return mlp(torch.segment_reduce(F.embedding(ids, table), "mean", offsets=offsets, axis=0), w1, b1, w2, b2)


@implementation("rec_block", "index_add", takes="dense",
                description="gather, index_add the rows into (B, M) by segment id, divide by lengths, MLP")
def index_add(ids, offsets, table, w1, b1, w2, b2):
    rows = F.embedding(ids, table)
    lengths = offsets.diff()
    sums = rows.new_zeros(lengths.shape[0], rows.shape[1]).index_add_(0, _segment_ids(offsets, ids.shape[0]), rows)
    return mlp(sums / lengths.unsqueeze(1), w1, b1, w2, b2)


# --- ours -----------------------------------------------------------------------------------


def jaggedperf_plain(ids, offsets, padded_len, table, w1, b1, w2, b2):
    return mlp(ops.jagged_mean(F.embedding(ids, table), offsets), w1, b1, w2, b2)


@implementation("rec_block", "jaggedperf", takes="dense", takes_max_seqlen=True, setup=native_launch,
                description="gather, jaggedperf.ops.jagged_mean(rows, offsets, max_seqlen=…), MLP")
def jaggedperf_block(ids, offsets, max_seqlen, table, w1, b1, w2, b2):
    return mlp(ops.jagged_mean(F.embedding(ids, table), offsets, max_seqlen=max_seqlen), w1, b1, w2, b2)


@implementation("rec_block", "jaggedperf_njt", takes="njt", plain=jaggedperf_plain, setup=native_launch,
                description="F.embedding on the NJT of ids, jaggedperf.ops.jagged_mean(nt), MLP")
def jaggedperf_block_njt(nt, table, w1, b1, w2, b2):
    return mlp(ops.jagged_mean(F.embedding(nt, table)), w1, b1, w2, b2)
