"""Hypothesis profiles: ``ci`` (default) and ``thorough``, chosen by the
environment variable SPASEQ_HYPOTHESIS_PROFILE."""

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                      HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=300, **_COMMON)
settings.register_profile("thorough", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("SPASEQ_HYPOTHESIS_PROFILE", "ci"))
