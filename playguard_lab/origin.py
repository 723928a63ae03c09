"""The lab's git origin: a bare repository holding the compose project the Playgrounds run."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from playguard_lab.process import clean_env, find_binary, run_command


def compose_file(image: str) -> str:
    return (
        "services:\n"
        "  app:\n"
        f"    image: {json.dumps(image)}\n"
        '    command: ["sleep", "86400"]\n'
        '    network_mode: "none"\n'
    )


class GitOrigin:
    """A bare origin repository, the daemon's source of compose projects, with `main` and `feature`.

    Git runs without the user's or the system's configuration, so a developer's settings (signing,
    hooks, default branch) cannot change what the tests see.
    """

    def __init__(self, workdir: Path, image: str) -> None:
        self.workdir = workdir.absolute()
        self._git = find_binary("git", "git")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path = self.workdir / "origin.git"
        self.url = self.path.as_uri()
        self._env = clean_env(
            {
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_AUTHOR_NAME": "Playguard Lab",
                "GIT_AUTHOR_EMAIL": "lab@playguard.invalid",
                "GIT_COMMITTER_NAME": "Playguard Lab",
                "GIT_COMMITTER_EMAIL": "lab@playguard.invalid",
            }
        )
        self.git("init", "--quiet", "--bare", "--initial-branch=main", str(self.path))
        self.commit("main", {"compose.yaml": compose_file(image)}, "Add the app service")
        self.commit("feature", {"FEATURE": "work in progress\n"}, "Start the feature branch")

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return run_command([self._git, *args], env=self._env, cwd=cwd)

    def branches(self) -> list[str]:
        listing = self.git("ls-remote", "--heads", self.url)
        return sorted(line.split("refs/heads/", 1)[1] for line in listing.splitlines())

    def commit(self, branch: str, files: dict[str, str], message: str) -> str:
        """Commit through a scratch clone and a push, the way a developer's change arrives. Always
        makes a new commit, even when the files are unchanged; a new branch starts from main."""
        existing = self.branches()
        with tempfile.TemporaryDirectory(prefix="clone-", dir=self.workdir) as scratch:
            clone = Path(scratch)
            self.git("clone", "--quiet", self.url, str(clone))
            if branch in existing:
                self.git("checkout", "--quiet", branch, cwd=clone)
            elif "main" in existing:
                self.git("checkout", "--quiet", "-b", branch, "origin/main", cwd=clone)
            else:
                self.git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=clone)
            for name, content in files.items():
                target = clone / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            self.git("add", "--all", cwd=clone)
            self.git("commit", "--quiet", "--allow-empty", "--message", message, cwd=clone)
            self.git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)
            return self.git("rev-parse", "HEAD", cwd=clone).strip()

    def delete_branch(self, branch: str) -> None:
        self.git("--git-dir", str(self.path), "branch", "--quiet", "-D", branch)
