"""The web view, a part of its own beside the daemon: its pages and routes (``view``), who a
request is (``users``, ``auth``, ``sessions``, ``login``, ``http_guard``), what an operator may do
from it (``actions``), the pictures and timelines it draws, its templates and static files. The
daemon (``service``) serves it; the engine and everything below it know nothing of it."""
