"""`python -m sparkrack.cli`: what the verification at the end of `up` runs."""

import sys

from sparkrack.cli import main

sys.exit(main())
