"""``python -m actline`` runs the command line."""

from actline.cli.main import main

raise SystemExit(main())
