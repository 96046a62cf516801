"""`python -m pytest_neuronprof`: the `neuronprof` command."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
