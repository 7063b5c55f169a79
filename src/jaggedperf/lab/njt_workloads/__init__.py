"""NJT functions as users write them, for timing ``jaggedperf.compile`` against ``torch.compile`` and eager mode:
the workloads (``catalog``); each checked, timed side by side and its training-step bar judged on a case (``cells``);
the floor and limit of a step through the boundary, timed beside it (``floor``)."""

from jaggedperf.lab.njt_workloads.catalog import (WORKLOADS, Built, Workload, get, njt_mean, ragged_softmax,
                                                  ragged_softmax_reference)
from jaggedperf.lab.njt_workloads.cells import (STEP_BAR, WAYS, Cell, Check, StepVerdict, case_name, check,
                                                step_verdict, time_cell)
from jaggedperf.lab.njt_workloads.floor import (CROSSING_STEPS, crossing_steps, engine_steps, forward, limit_kind,
                                                limit_walls, region_step, step)

__all__ = ["CROSSING_STEPS", "STEP_BAR", "WAYS", "WORKLOADS", "Built", "Cell", "Check", "StepVerdict", "Workload",
           "case_name", "check", "crossing_steps", "engine_steps", "forward", "get", "limit_kind", "limit_walls",
           "njt_mean", "ragged_softmax", "ragged_softmax_reference", "region_step", "step", "step_verdict",
           "time_cell"]
