"""``python -m bench.cluster``: scale-out with 1 and 2 node actors (see the package)."""

from bench.cluster.run import main

raise SystemExit(main())
