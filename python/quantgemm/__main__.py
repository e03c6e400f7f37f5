"""`python -m quantgemm` runs the benchmark (quantgemm.bench)."""

import sys

from .bench import main

sys.exit(main())
