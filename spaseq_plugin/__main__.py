"""``python -m spaseq_plugin ...``: the same as ``spaseq ...``."""
import sys

from spaseq_plugin.cli import main

sys.exit(main())
