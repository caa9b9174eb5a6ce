"""The tree of the last commit before issue 45's refactor (BASELINE), to run real nodes of it
beside nodes of the tree under test: the contract tests (test_contract_status.py,
test_mixed_version.py) hold the HTTP API, the peer messages and the metrics to what BASELINE
answers.

BASELINE is read from the repository the tests run in (`git archive`), once per session, into
a temporary directory removed at the end. A node runs from a tree through its environment:
``PYTHONPATH=TREE`` ahead of the editable install, and ``PYTHONSAFEPATH=1`` so that the
current directory is not put first on the import path: `python -m crawler_node` started from a
checkout would otherwise import that checkout's package, whatever PYTHONPATH says. Without git
or without the commit (a shallow clone), the tests skip with the reason, unless ``CI`` is set:
CI must run them, so there they fail.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import crawler_node

# The last commit on main before issue 45's refactor (`git rev-parse 9ca1c07`).
BASELINE = "9ca1c073314b4ea864013dc6978482f541adb0a3"
# The tree under test: the one this process imports crawler_node from.
HEAD_DIR = Path(crawler_node.__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Tree:
    """A source tree a node process can run from."""

    name: str  # "baseline" or "head": says which in test ids and failure messages
    path: Path

    def env(self) -> dict[str, str]:
        """The environment of a node (or any process) that imports crawler_node from this tree."""
        return {**os.environ, "PYTHONPATH": str(self.path), "PYTHONSAFEPATH": "1"}

    def imported_from(self) -> Path:
        """Where a process started with ``env()``, in this process's directory, imports
        crawler_node from: a check that the tree is the one that runs."""
        found = subprocess.run([sys.executable, "-c", "import crawler_node; print(crawler_node.__file__)"],
                               env=self.env(), capture_output=True, text=True, timeout=60, check=True)
        return Path(found.stdout.strip()).resolve().parent.parent


HEAD = Tree("head", HEAD_DIR)


def unavailable(reason: str) -> None:
    """Skip for ``reason``; fail where CI is set (``CI``, or .ci/run's ``CRAWLER_REQUIRE_BASELINE``),
    as CI must run the contract tests."""
    if os.environ.get("CI") or os.environ.get("CRAWLER_REQUIRE_BASELINE"):
        pytest.fail(f"CI is set, and the BASELINE tree cannot be made: {reason}", pytrace=False)
    pytest.skip(f"BASELINE tree unavailable: {reason}")


def materialise(into: Path, *, repo: Path = HEAD_DIR, commit: str = BASELINE) -> Tree:
    """``commit``'s tree, extracted into ``into``, its modules compiled once (this machine and
    CI set PYTHONDONTWRITEBYTECODE: each node process would compile them again)."""
    git = shutil.which("git")
    if git is None:
        unavailable("git is not installed")
    assert git is not None
    if subprocess.run([git, "-C", str(repo), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        unavailable(f"{repo} is not a git checkout")
    if subprocess.run([git, "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                      capture_output=True).returncode != 0:
        unavailable(f"commit {commit} is not in {repo}'s history (a shallow clone?)")
    archive = subprocess.run([git, "-C", str(repo), "archive", "--format=tar", commit],
                             capture_output=True, check=True, timeout=120)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "crawler_node")], check=True, timeout=300)
    tree = Tree("baseline", into)
    imported = tree.imported_from()
    assert imported == into.resolve(), f"a process given the BASELINE tree imports crawler_node from {imported}"
    return tree


@pytest.fixture(scope="session")
def baseline_tree() -> Iterator[Tree]:
    """BASELINE's tree, made once per session (per xdist worker) and removed after it."""
    assert HEAD.imported_from() == HEAD_DIR, "a process given the tree under test imports another crawler_node"
    with tempfile.TemporaryDirectory(prefix="crawler-baseline-") as directory:
        yield materialise(Path(directory))
