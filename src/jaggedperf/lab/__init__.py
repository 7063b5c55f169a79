"""The lab: measures, checks and explains implementations of the jagged ops (``runner``, ``sweep``, ``doctor``,
``results``)."""

import logging as _logging


class _NjtTracingNotice(_logging.Filter):
    """Drops torch's "is_fx_tracing will return true ..." warning: ``torch.nested.nested_tensor_from_jagged`` asks
    ``is_fx_tracing()``, which logs it on the first NJT a process builds (torch's own deprecation notice, nothing a
    measurement did); every lab process (the CLI's, a sweep's workers) builds NJTs, and each printed it. Attached to
    the logger by name: no torch import here."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return "is_fx_tracing will return true" not in record.getMessage()


_logging.getLogger("torch.fx._symbolic_trace").addFilter(_NjtTracingNotice())
