"""``python -m bench.loop``: the decision loop's own cost per round (see the package)."""

from bench.loop.run import main

raise SystemExit(main())
