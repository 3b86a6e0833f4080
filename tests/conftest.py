"""Hypothesis profiles, chosen by the environment variable SPASEQ_HYPOTHESIS_PROFILE;
the ``slow`` marker; the shared Spark session.

``ci`` (default)  ``max_examples`` 300: the default test run;
``thorough``      5,000;
``long``          20,000: ``tests/test_differential.py`` and ``tests/test_spectra.py``
                  then run 100,000 examples in all (docs/architecture.md, "Testing").

Every property test takes its number of examples from the profile, as a
multiple of ``max_examples`` (``helpers.examples``)."""

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                      HealthCheck.data_too_large, HealthCheck.large_base_example])
settings.register_profile("ci", max_examples=300, **_COMMON)
settings.register_profile("thorough", max_examples=5000, **_COMMON)
settings.register_profile("long", max_examples=20000, **_COMMON)
settings.load_profile(os.environ.get("SPASEQ_HYPOTHESIS_PROFILE", "ci"))


import pytest


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession the test session shares (it costs seconds to start)."""
    from spaseq_plugin.spark.session import spark_session, stop_spark
    session = spark_session("local[2]")
    yield session
    stop_spark()


# The slow tests, left out of the quick loop (`pytest -m "not slow"`, under a minute):
# whole modules (Spark jobs, property-based comparisons with the reference evaluator,
# benchmarks, a pip install), tests that start Spark or Virtuoso (seconds each), and
# property-based tests with many examples.
SLOW_MODULES = {"test_spark_engine.py", "test_kb_materialize.py", "test_differential.py", "test_bench.py",
                "test_third_party_plugin.py"}
SLOW_FIXTURES = {"spark", "virtuoso"}
SLOW_TESTS = {"test_fast_path_agrees_with_oxigraph", "test_batches_read_like_statements"}


def pytest_collection_modifyitems(items):
    """Mark the slow tests (see SLOW_MODULES, SLOW_FIXTURES, SLOW_TESTS) with ``slow``."""
    for item in items:
        if (item.path.name in SLOW_MODULES or item.originalname in SLOW_TESTS
                or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
                or "virtuoso" in item.name):            # a backend parameter that starts Virtuoso
            item.add_marker(pytest.mark.slow)
