"""``python -m hora.runner ...`` is ``horarun ...``."""

import sys

from hora.runner.launch import main

sys.exit(main())
