"""`status --watch` frames: plain text where stdout is not a terminal, one table redrawn in place
(rich's Live display) where it is. The command itself, against a real node: tests/test_control.py."""

from __future__ import annotations

import io
import re

from crawler_node.tools.report import WatchFrame, format_watch
from crawler_node.tools.watch import WatchScreen

FRAME = WatchFrame(title="a: crawling",
                   rows=(("a", "alive paused", "130", "5.0", "40", "3", "7", "100/300  33%"),
                         ("[bold]b[/bold]", "down", "-", "-", "-", "-", "-", "-")),
                   progress="progress: 100/300  33% URLs finished of those known")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_frames_to_a_pipe_are_plain_text_one_after_another() -> None:
    stream = io.StringIO()
    with WatchScreen(stream) as screen:
        screen.show(FRAME)
        screen.unreachable("http://n: UNREACHABLE for 3 s (refused); the last frame is stale")
        screen.show(FRAME)
    text = stream.getvalue()
    assert "\x1b" not in text
    assert text.count(format_watch(FRAME)) == 2 and text.count("progress:") == 2
    assert "UNREACHABLE for 3 s" in text.splitlines()[5]


def test_frames_on_a_terminal_are_one_table_redrawn_in_place() -> None:
    stream = Terminal()
    with WatchScreen(stream) as screen:
        screen.show(FRAME)
        screen.show(FRAME)
        screen.unreachable("http://n: UNREACHABLE for 3 s (refused); the last frame is stale")
    text = stream.getvalue()
    assert "\x1b[1A" in text  # the cursor goes back up over the last frame
    last = _ESCAPES.sub("", text).splitlines()
    assert any("UNREACHABLE for 3 s" in line for line in last[-9:])
    assert any(line.split()[:2] == ["a", "alive"] for line in last)
    assert any("[bold]b" in line for line in last)  # a name is shown as it is, never read as markup
    assert last[-1].startswith("progress: 100/300  33% URLs finished of those known")
