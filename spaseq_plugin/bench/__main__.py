"""``python -m spaseq_plugin.bench ...``: the same as ``spaseq bench ...``."""
import sys

from spaseq_plugin.bench.runner import main

sys.exit(main())
