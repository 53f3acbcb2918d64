"""`python -m robostream.bench ...`: the same as `robostream bench ...`."""

import sys

from robostream.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
