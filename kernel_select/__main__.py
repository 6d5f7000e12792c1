"""`python -m kernel_select`: the `kernel-select` command."""

import sys

from kernel_select.cli.main import main

sys.exit(main())
