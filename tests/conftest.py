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


import pytest


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession the test session shares (it costs seconds to start)."""
    from spaseq_plugin.spark.session import spark_session, stop_spark
    session = spark_session("local[2]")
    yield session
    stop_spark()
