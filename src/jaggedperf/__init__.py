"""jaggedperf: measure, explain and fix jagged reductions in eager PyTorch and under torch.compile."""

from jaggedperf.batch import JaggedBatch
from jaggedperf.inputs import Case, make_batch

__version__ = "0.1.0"
__all__ = ["Case", "JaggedBatch", "make_batch", "__version__"]
