"""What an operator types and reads: the ``playguard`` command, its displays, status, describe,
history, check and the ``db`` commands."""
