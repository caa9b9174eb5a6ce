"""Where the frames of `crawler-node status --watch` go.

On a terminal, one table redrawn in place: rich's Live display (it sizes the columns to what
they hold, so a long member name does not push the row out of line, and it moves the cursor back
over the last frame instead of clearing the screen, so the scrollback stays). Anywhere else (a
pipe, a file, `watch -n`), each frame is printed after the last as plain text
(tools.report.format_watch), which a script can read line by line.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

from crawler_node.tools.report import WATCH_COLUMNS, WatchFrame, format_watch

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

_STATE_STYLES = {"alive": "green", "suspect": "yellow", "down": "red"}


class WatchScreen:
    """Shows one frame after another on ``stream``; a context manager (the live display is
    stopped on the way out, Ctrl-C included, and its last frame left on the screen)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._live: Live | None = None
        self._last: RenderableType | None = None

    def __enter__(self) -> WatchScreen:
        if self._stream.isatty():
            # Imported here: ~50-200 ms that only a terminal's --watch needs.
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self._stream), auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def show(self, frame: WatchFrame) -> None:
        stamp = time.strftime("%H:%M:%S")
        if self._live is None:
            print(f"{stamp}  {format_watch(frame)}", file=self._stream, flush=True)
            return
        self._last = _table(frame, stamp)
        self._live.update(self._last, refresh=True)

    def unreachable(self, message: str) -> None:
        """The node did not answer: said above the last frame, which stays (stale)."""
        stamp = time.strftime("%H:%M:%S")
        if self._live is None:
            print(f"{stamp}  {message}", file=self._stream, flush=True)
            return
        from rich.console import Group
        from rich.text import Text

        said = Text(f"{stamp}  {message}", style="bold red")
        self._live.update(said if self._last is None else Group(said, self._last), refresh=True)


def _table(frame: WatchFrame, stamp: str) -> RenderableType:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # Text, not str: a member's name or state is never read as rich markup.
    table = Table(title=Text(f"{stamp}  {frame.title}", style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, caption=Text(frame.progress), caption_justify="left")
    for header, align, _ in WATCH_COLUMNS:
        # On a narrow terminal the names wrap (or end in "…"); the figures and the headers stay whole.
        numbers = align == ">"
        table.add_column(header, justify="right" if numbers else "left", no_wrap=numbers, min_width=len(header))
    for row in frame.rows:
        state = row[1]
        cells = [Text(cell) for cell in row]
        cells[1] = Text(state, style=_STATE_STYLES.get(state.split(" ")[0], ""))
        table.add_row(*cells)
    return table
