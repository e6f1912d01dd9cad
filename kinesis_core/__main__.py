"""``python -m kinesis_core``: the ``kinesis-connectors`` command."""

from kinesis_core.cli import main

raise SystemExit(main())
