"""``python -m actline`` runs the command line."""

from actline.cli import main

raise SystemExit(main())
