"""`python -m validation.companion.bench`: see `validation.companion.bench.cli`."""

import sys

from validation.companion.bench.cli import main

sys.exit(main())
