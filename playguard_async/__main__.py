"""``python -m playguard_async`` runs the ``playguard`` command."""

from playguard_async.cli import main

main()
