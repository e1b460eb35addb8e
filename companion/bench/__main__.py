"""`python -m companion.bench`: see `companion.bench.cli`."""

import sys

from companion.bench.cli import main

sys.exit(main())
