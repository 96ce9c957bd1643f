"""``python -m r2f_bench`` (and ``accelerate launch -m r2f_bench``): the ``r2f-bench`` command."""

import sys

from .cli import main

sys.exit(main())
