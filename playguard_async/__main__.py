"""``python -m playguard_async`` runs the ``playguard`` command."""

from playguard_async.operator.cli import main

main()
