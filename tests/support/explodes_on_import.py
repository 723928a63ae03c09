"""A phase module whose import fails with an error of its own, as a broken plug-in's would."""

raise RuntimeError("plug-in broken\non two lines")
