"""``python -m bench [--quick] [--json] [--redis-url URL] [--out DIR]``."""

import sys

from bench.suite.run import main

sys.exit(main())
