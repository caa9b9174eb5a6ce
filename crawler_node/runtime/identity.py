"""A data directory has an identity: the node id (and the crawl name) of its first start.

The data directory holds one member's queue, its arc's replicas and its archive. Started under
another `--node-id`, it used to crawl on: the cluster saw a new member and an old one "down, its
queue waits" for good, and the new one fetched again what the old one had (19.4% duplicates in
the fault audit). The first start now writes `identity.json`; a start under another id is
refused with one line, unless `--rename-node` says the rename is meant.

`--rename-node` on a node alone (no --peer, no --peer-dns) rewrites the identity: nothing but the
id changes hands (the frontier, the archive and the crawl log carry no owner). In a cluster, the
old id's arc and queue would have to be handed over as a leave does: not yet available, and
refused with one line that says how to go on.

A data directory from before this file is adopted by the id that starts it first.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from crawler_node.datadir_layout import DataDirLayout, scratch_path


@dataclass(frozen=True, slots=True)
class Identity:
    node_id: str
    crawl_name: str


def read_identity(data_dir: Path) -> Identity | None:
    """The identity written at the first start; None when there is none yet. A file that
    cannot be read raises ValueError (a hand edit: never guessed over)."""
    path = DataDirLayout(data_dir).identity
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read ({exc})") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("node_id"), str):
        raise ValueError(f"{path} names no node_id")
    return Identity(raw["node_id"], str(raw.get("crawl_name", "")))


def read_identity_or_none(data_dir: Path) -> Identity | None:
    """read_identity, with a file that cannot be read taken as none (claim_identity says why)."""
    try:
        return read_identity(data_dir)
    except ValueError:
        return None


def write_identity(data_dir: Path, identity: Identity) -> None:
    """Atomically: a crash leaves the old file or the new one."""
    path = DataDirLayout(data_dir).identity
    temporary = scratch_path(path)
    temporary.write_text(json.dumps({"node_id": identity.node_id, "crawl_name": identity.crawl_name,
                                     "written_at": time.time()}) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def identity_problem(recorded: Identity | None, wanted: Identity, *, rename: bool, clustered: bool,
                     data_dir: Path) -> str | None:
    """Why a node started as ``wanted`` must not use a data directory that is ``recorded``
    (one line), or None. Pure: the caller reads and writes the file."""
    if recorded is None or recorded.node_id == wanted.node_id:
        return None
    if not rename:
        return (f"data directory {data_dir} belongs to node {recorded.node_id!r} (written at its first start), "
                f"not {wanted.node_id!r}: start it with --node-id {recorded.node_id}, or give --rename-node to "
                f"rename that node to {wanted.node_id!r}")
    if clustered:
        return (f"--rename-node is not yet available in a cluster (node {recorded.node_id!r}'s arc and queue would "
                f"have to be handed over as a leave does): start {data_dir} with --node-id {recorded.node_id}, or "
                f"start {wanted.node_id!r} on a new data directory")
    return None


def claim_identity(data_dir: Path, wanted: Identity, *, rename: bool, clustered: bool) -> str | None:
    """Check (and on a first start or an allowed rename, write) the data directory's identity.
    Returns the one-line refusal, or None; call it holding the data directory's lock."""
    try:
        recorded = read_identity(data_dir)
    except ValueError as exc:
        return f"{exc}: fix or remove it (the next start writes it again)"
    problem = identity_problem(recorded, wanted, rename=rename, clustered=clustered, data_dir=data_dir)
    if problem is None and recorded != wanted:
        write_identity(data_dir, wanted)
    return problem
