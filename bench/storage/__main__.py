"""``python -m bench.storage``: turn persistence against one JSON rewrite (see the package)."""

from bench.storage.run import main

raise SystemExit(main())
