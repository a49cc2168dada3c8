"""``python -m semiparam``: the ``semiparam`` command."""

from .cli.main import main

raise SystemExit(main())
