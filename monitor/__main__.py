"""``python -m prefixmon``: the command line."""

from .cli import main

raise SystemExit(main())
