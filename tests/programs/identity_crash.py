"""Creates the identity key file argv[1] and dies (exit 9) right after opening it, before writing
a byte: tests/test_faults.py checks that no half-written key is left behind.
"""

import os
import sys
from pathlib import Path

from swarmnode.swarm.identity import Identity

os.fdopen = lambda *args, **kwargs: os._exit(9)
Identity.load_or_create(Path(sys.argv[1]))
