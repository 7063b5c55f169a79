"""torch's "is_fx_tracing will return true" notice (logged on the first NJT a process builds) is dropped in every lab
process: importing the lab attaches the filter, so the CLI and a sweep's workers alike print none."""

import subprocess
import sys


def test_the_first_njt_of_a_lab_process_prints_no_torch_notice():
    done = subprocess.run([sys.executable, "-c", "import jaggedperf.lab, torch; "
                           "torch.nested.nested_tensor_from_jagged(torch.randn(3, 2), torch.tensor([0, 3]))"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "is_fx_tracing" not in done.stderr
