"""jaggedperf: measure, explain and fix jagged ops (reductions, softmax, layer norm) in eager PyTorch and under
torch.compile."""

from jaggedperf.api import Results, bench, load, measure
from jaggedperf.batch import JaggedBatch
from jaggedperf.boundary import compile
from jaggedperf.inputs import Case, make_batch
from jaggedperf.ops import jagged_layer_norm, jagged_mean, jagged_softmax, jagged_sum

__version__ = "0.1.0"
__all__ = ["Case", "JaggedBatch", "Results", "bench", "compile", "jagged_layer_norm", "jagged_mean", "jagged_softmax",
           "jagged_sum", "load", "make_batch", "measure", "__version__"]
