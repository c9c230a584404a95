"""``python -m bench.longrun``: a context policy against its baseline and its floor (see the
package)."""

from bench.longrun.run import main

raise SystemExit(main())
