"""playguard_async: keeps Docker hosts true to their desired state, one leased reconciler each."""

__version__ = "0.1.0"
