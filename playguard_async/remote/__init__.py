"""The remote layer: SSH sessions, the Docker API through them, command builders."""
