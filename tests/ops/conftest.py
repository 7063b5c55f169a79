"""Settings for the ops tests: hypothesis profiles and the interpreter switch.

Profiles (pick with HYPOTHESIS_PROFILE, default "ci"): "ci" runs 500 examples per dtype against the
CPU kernel and INTERP_EXAMPLES against the Triton kernels under TRITON_INTERPRET=1; "dev" runs many
more of both.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile(
    "dev", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_configure(config):
    # The interpreter evaluates 0/0 (mean of an empty segment) in numpy, which warns; NaN is the answer.
    config.addinivalue_line("filterwarnings", "ignore:invalid value encountered in divide:RuntimeWarning")
