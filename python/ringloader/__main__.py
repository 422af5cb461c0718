"""``python -m ringloader``: see :mod:`ringloader.cli`."""

from .cli import main

raise SystemExit(main())
