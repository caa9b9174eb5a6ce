"""Where throughput went between two commits: this checkout's node against older ones.

    python bench/ladder.py --since b031966 [--steps 7 --rounds 2]
    python bench/ladder.py --commits 1806083~1 1806083 --rounds 4   # one step, closer

Takes `--steps` commits evenly spaced on the first-parent path from `--since` (included) to
HEAD (or the `--commits` given), checks each out in a temporary git worktree, and runs
`bench/throughput.py --other-tree` against it: the node of this checkout and the older one in
the same rounds, against the same testweb and bare loop. Prints, per commit, both nodes'
node/bare ratios and this node's pages/s against the older one's, round by round. A step in
that column between two neighbours is where to look (then `--commits A B` between them);
bench/cpu_split.py then says which process pays. The worktrees are removed at the end.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(TREE), *args], check=True, capture_output=True, text=True).stdout


def evenly_spaced(since: str, steps: int) -> list[str]:
    path = git("rev-list", "--first-parent", "--reverse", f"{since}..HEAD").split()
    commits = [git("rev-parse", since).strip()] + path[:-1]  # HEAD is this checkout
    if steps >= len(commits):
        return commits
    return [commits[round(i * (len(commits) - 1) / (steps - 1))] for i in range(steps)] if steps > 1 else commits[:1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--since", help="the oldest commit of the ladder")
    parser.add_argument("--commits", nargs="+", help="exactly these commits instead")
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not args.since and not args.commits:
        parser.error("give --since or --commits")
    commits = [git("rev-parse", c).strip() for c in args.commits] if args.commits else evenly_spaced(args.since,
                                                                                                       args.steps)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ladder-") as tmp:
        for commit in commits:
            worktree = Path(tmp) / commit[:10]
            git("worktree", "add", "--detach", str(worktree), commit)
            try:
                subprocess.run([sys.executable, "-m", "compileall", "-q", "crawler_node"], cwd=worktree, check=False)
                subject = git("log", "-1", "--format=%h %s", commit).strip()[:90]
                print(f"== {subject}", flush=True)
                out = subprocess.run([sys.executable, str(TREE / "bench" / "throughput.py"), "--rounds",
                                      str(args.rounds), "--other-tree", str(worktree)],
                                     capture_output=True, text=True, timeout=3600)
                ratios = re.findall(r"median ratio node/bare ([\d.]+)", out.stdout)
                paired = re.search(r"pages/s x([\d.]+) \(middle half ([\d.]+)-([\d.]+)\)", out.stdout)
                if out.returncode != 0 or len(ratios) != 2 or paired is None:
                    print(out.stdout[-2000:], out.stderr[-2000:], sep="\n", flush=True)
                    rows.append((subject, "failed", "", ""))
                    continue
                rows.append((subject, ratios[0], ratios[1], f"x{paired[1]} ({paired[2]}-{paired[3]})"))
                print(f"   this node/bare {ratios[0]}, that node/bare {ratios[1]}, this/that {rows[-1][3]}",
                      flush=True)
            finally:
                git("worktree", "remove", "--force", str(worktree))
    print("\n| commit | this node/bare | that node/bare | this / that pages/s |\n|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
