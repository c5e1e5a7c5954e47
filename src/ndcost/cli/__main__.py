"""``python -m ndcost.cli``: the console script."""
import sys

from .main import main

sys.exit(main())
