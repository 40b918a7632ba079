"""``python -m evalsentry.cli``."""

import sys

from evalsentry.cli import main

sys.exit(main())
