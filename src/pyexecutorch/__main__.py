"""``python -m pyexecutorch``: the command line (see ``pyexecutorch --help``)."""

import sys

from pyexecutorch.cli.main import main

sys.exit(main())
