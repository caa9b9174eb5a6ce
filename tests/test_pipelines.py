"""User pipelines: loading by spec or entry point, the runner's budget and item rules, the
bundled summary pipeline, and the items files."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawler_node.pipelines import Page
from crawler_node.pipelines import summary as summary_module
from crawler_node.pipelines.loader import NamedPipeline, PipelineError, load_pipelines
from crawler_node.pipelines.runner import PageOutput, PipelineRunner
from crawler_node.store.items import ItemWriter

URL = "http://site-1.test/dir/page.html"
SLEEP_S = 10.0  # what a runaway pipeline would take; a stopped one returns in a fraction
_module_serial = itertools.count()


def make_page(text: str = "<html><body><p>hi</p></body></html>", **fields) -> Page:
    values: dict = dict(
        url=URL, status=200, headers=[("Content-Type", "text/html; charset=utf-8"), ("X-Two", "a"), ("x-two", "b")],
        text=text, links=["http://site-1.test/a"], depth=2, content_type="text/html",
    )
    values.update(fields)
    return Page(**values)


def named(name: str, pipeline: Callable) -> NamedPipeline:
    return NamedPipeline(name, pipeline)


# --- Page ---------------------------------------------------------------------------------

def test_page_header_lookup_ignores_case_and_takes_the_first() -> None:
    page = make_page()
    assert page.header("content-type") == "text/html; charset=utf-8"
    assert page.header("X-TWO") == "a"
    assert page.header("missing") is None
    assert page.header("missing", "fallback") == "fallback"


# --- loader -------------------------------------------------------------------------------

@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Writes a module of the user's to an importable directory; returns its (unique) name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def write(source: str) -> str:
        name = f"user_pipes_{next(_module_serial)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


USER_SOURCE = """
    def titles(page):
        return {"kind": "title"}

    class Extractors:
        @staticmethod
        def links(page):
            yield {"kind": "links", "count": len(page.links)}

    NOT_CALLABLE = 42
"""


def test_loads_module_callables_including_dotted_attributes(user_module) -> None:
    module = user_module(USER_SOURCE)
    loaded = load_pipelines([f"{module}:titles", f" {module}:Extractors.links "])
    assert [pipeline.name for pipeline in loaded] == [f"{module}:titles", f"{module}:Extractors.links"]
    assert loaded[0].pipeline(make_page()) == {"kind": "title"}
    assert list(loaded[1].pipeline(make_page())) == [{"kind": "links", "count": 1}]


def test_loads_an_entry_point_by_name() -> None:
    [loaded] = load_pipelines(["summary"])
    assert loaded.name == "summary"
    assert loaded.pipeline is summary_module.extract


def load_error(spec: str) -> str:
    with pytest.raises(PipelineError) as caught:
        load_pipelines([spec])
    message = str(caught.value)
    assert "\n" not in message and repr(spec) in message and caught.value.spec == spec
    return message


def test_each_load_failure_is_one_line_naming_the_spec_and_the_cause(user_module) -> None:
    module = user_module(USER_SOURCE)
    broken = user_module("raise RuntimeError('no config\\nfound')\n")
    assert "cannot import module 'no_such_module_xyz': No module named 'no_such_module_xyz'" in load_error(
        "no_such_module_xyz:run"
    )
    assert f"module {module!r} has no attribute 'missing'" in load_error(f"{module}:missing")
    assert f"'{module}:Extractors' has no attribute 'nope'" in load_error(f"{module}:Extractors.nope")
    assert "is not callable (it is a int)" in load_error(f"{module}:NOT_CALLABLE")
    assert "RuntimeError: no config found" in load_error(f"{broken}:anything")
    unknown = load_error("no-such-pipeline")
    assert "no entry point of that name in group 'crawler_node.pipelines'" in unknown
    assert "installed: summary" in unknown
    assert "expected MODULE:CALLABLE" in load_error(f"{module}:")
    assert "expected MODULE:CALLABLE" in load_error(":titles")


def test_a_pipeline_given_twice_is_refused() -> None:
    with pytest.raises(PipelineError, match="given more than once"):
        load_pipelines(["summary", "summary"])


# --- runner: the same rules on the main thread (SIGALRM) and on a thread (timed) -----------

def run_on_thread(runner: PipelineRunner, page: Page) -> PageOutput:
    outputs: list[PageOutput] = []
    worker = threading.Thread(target=lambda: outputs.append(runner.run(page)), name="parser-thread")
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    return outputs[0]


@pytest.fixture(params=["main-thread", "other-thread"])
def run_page(request: pytest.FixtureRequest) -> Callable[[PipelineRunner, Page], PageOutput]:
    if request.param == "main-thread":
        return lambda runner, page: runner.run(page)
    return run_on_thread


def test_items_from_a_dict_a_generator_a_list_and_none(run_page) -> None:
    def one(page: Page) -> dict:
        return {"title": "été", "n": 1}

    def several(page: Page) -> Iterator[dict]:
        yield {"url": "http://elsewhere.test/", "i": 0}
        yield {"i": 1}

    runner = PipelineRunner(
        [named("one", one), named("several", several), named("listed", lambda page: [{"i": 2}]),
         named("nothing", lambda page: None)],
        budget_s=5.0,
    )
    output = run_page(runner, make_page())
    assert output.items == [
        '{"url":"http://site-1.test/dir/page.html","title":"été","n":1}',
        '{"url":"http://elsewhere.test/","i":0}',
        '{"url":"http://site-1.test/dir/page.html","i":1}',
        '{"url":"http://site-1.test/dir/page.html","i":2}',
    ]
    assert output.errors == [] and output.timed_out == [] and output.links == []


def test_follow_resolves_against_the_page_and_each_pipeline_has_its_own(run_page) -> None:
    def first(page: Page) -> None:
        page.follow("next.html")
        page.follow("/top?q=1")
        page.links.clear()  # changes its own copy only

    def second(page: Page) -> None:
        assert page._followed == [] and page.links == ["http://site-1.test/a"]
        page.follow("http://other.test/x")
        page.follow("next.html")  # followed twice on the page: handed on once

    output = run_page(PipelineRunner([named("first", first), named("second", second)], 5.0), make_page())
    assert output.links == [
        "http://site-1.test/dir/next.html", "http://site-1.test/top?q=1", "http://other.test/x",
    ]


def test_a_raising_pipeline_is_reported_and_contributes_nothing_while_others_produce(run_page) -> None:
    def broken(page: Page) -> Iterator[dict]:
        page.follow("/from-broken")
        yield {"partial": True}
        raise KeyError("price")

    def good(page: Page) -> dict:
        page.follow("/from-good")
        return {"ok": True}

    output = run_page(PipelineRunner([named("broken", broken), named("good", good)], 5.0), make_page())
    assert output.errors == [("broken", "KeyError: 'price'")]
    assert output.items == ['{"url":"http://site-1.test/dir/page.html","ok":true}']
    assert output.links == ["http://site-1.test/from-good"]


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ({"when": {1, 2}}, "TypeError: Object of type set is not JSON serializable (item 0)"),
        ({"score": float("nan")}, "ValueError: Out of range float values are not JSON compliant"),
        ([{"ok": 1}, ["not", "a", "dict"]], "TypeError: item 1 is a list, not a dict"),
        ("a string", "TypeError: returned a str; a pipeline returns None, a dict or dicts"),
        (7, "TypeError: returned a int; a pipeline returns None, a dict or dicts"),
        ({"big": "x" * 2_000}, "ValueError: item 0 is 2,051 bytes as JSON, over the limit of 1,000"),
        ([{"i": i} for i in range(11)], "ValueError: more than 10 items on one page"),
    ],
)
def test_items_the_store_cannot_take_are_the_pipelines_error(run_page, result: object, error: str) -> None:
    runner = PipelineRunner([named("bad", lambda page: result)], 5.0, max_items_per_page=10, max_item_bytes=1_000)
    output = run_page(runner, make_page())
    assert output.items == [] and len(output.errors) == 1
    assert output.errors[0][0] == "bad" and output.errors[0][1].startswith(error)


def test_a_lone_surrogate_is_written_escaped(run_page) -> None:
    output = run_page(PipelineRunner([named("p", lambda page: {"text": "bad \udcff byte é"})], 5.0), make_page())
    [line] = output.items
    assert line.isascii() and json.loads(line)["text"] == "bad \udcff byte é"


def test_a_generator_is_closed_when_its_items_are_refused(run_page) -> None:
    closed: list[bool] = []

    def endless(page: Page) -> Iterator[dict]:
        try:
            while True:
                yield {"n": 1}
        finally:
            closed.append(True)

    output = run_page(PipelineRunner([named("endless", endless)], 5.0, max_items_per_page=3), make_page())
    assert output.errors == [("endless", "ValueError: more than 3 items on one page")]
    assert closed == [True]


# --- runner: the budget ---------------------------------------------------------------------

def sleeper(page: Page) -> dict:
    page.follow("/never")
    time.sleep(SLEEP_S)
    return {"late": True}


def catches_exception(page: Page) -> dict:
    deadline = time.monotonic() + SLEEP_S
    while time.monotonic() < deadline:
        try:
            time.sleep(0.01)
        except Exception:  # a broad handler must not swallow the stop
            pass
    return {"late": True}


def swallows_everything_once(page: Page) -> dict:
    try:
        time.sleep(SLEEP_S)
    except BaseException:  # noqa: B036 - what a careless pipeline does
        pass
    time.sleep(SLEEP_S)
    return {"late": True}


def yields_then_stalls(page: Page) -> Iterator[dict]:
    yield {"early": True}
    time.sleep(SLEEP_S)


@pytest.mark.parametrize("pipeline", [sleeper, catches_exception, swallows_everything_once, yields_then_stalls])
def test_the_budget_stops_a_pipeline_on_the_main_thread(pipeline: Callable) -> None:
    runner = PipelineRunner([named("slow", pipeline), named("fast", lambda page: {"fast": True})], budget_s=0.2)
    started = time.monotonic()
    output = runner.run(make_page())
    assert time.monotonic() - started < SLEEP_S / 2
    assert output.timed_out == ["slow"] and output.errors == []
    assert output.items == ['{"url":"http://site-1.test/dir/page.html","fast":true}'] and output.links == []


def test_the_previous_alarm_handler_and_timer_are_put_back() -> None:
    seen: list[int] = []
    saved_handler = signal.getsignal(signal.SIGALRM)  # pytest-timeout's, with its timer
    saved_timer = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        signal.signal(signal.SIGALRM, lambda signum, frame: seen.append(signum))
        own_handler = signal.getsignal(signal.SIGALRM)
        runner = PipelineRunner([named("fast", lambda page: None), named("slow", sleeper)], budget_s=0.05)
        runner.run(make_page())
        # No timer of ours is left to fire after run() returned.
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert signal.getsignal(signal.SIGALRM) is own_handler

        signal.setitimer(signal.ITIMER_REAL, 100.0)
        runner.run(make_page())
        assert signal.getsignal(signal.SIGALRM) is own_handler
        assert 90.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 100.0
        assert seen == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, saved_handler)
        if saved_timer[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, *saved_timer)


def test_off_the_main_thread_late_output_is_discarded() -> None:
    def late(page: Page) -> dict:
        page.follow("/late")
        time.sleep(0.3)
        return {"late": True}

    runner = PipelineRunner([named("late", late), named("fast", lambda page: {"fast": True})], budget_s=0.1)
    output = run_on_thread(runner, make_page())
    assert output.timed_out == ["late"] and output.errors == [] and output.links == []
    assert output.items == ['{"url":"http://site-1.test/dir/page.html","fast":true}']


def test_runner_refuses_limits_that_admit_nothing() -> None:
    for options in ({"budget_s": 0}, {"budget_s": 1, "max_items_per_page": 0}, {"budget_s": 1, "max_item_bytes": 0}):
        with pytest.raises(ValueError):
            PipelineRunner([], **options)


# --- summary --------------------------------------------------------------------------------

ARTICLE_PAGE = """<!doctype html>
<html lang="en"><head>
  <meta charset="utf-8">
  <title>  Ten ways to
     crawl politely | Example Blog </title>
  <meta name="Description" content="  How a crawler keeps  to its per-host limits. ">
  <meta property="og:description" content="The Open Graph text">
  <style>body { color: red }</style>
  <script>var tracking = "do not include";</script>
</head>
<body>
  <header><a href="/">Example Blog</a><nav><a href="/about">About</a></nav></header>
  <main>
    <article>
      <h1>Ten ways to crawl politely</h1>
      <p>First, read <b>robots</b>.txt.</p><p>Second, back off on 429.</p>
      <aside>Related: buy our book</aside>
      <form><input name="q"><button>Search</button></form>
      <script>alert("no")</script>
      <noscript>Enable JavaScript</noscript>
      <template><p>template text</p></template>
    </article>
  </main>
  <footer>Copyright 2024</footer>
</body></html>"""


def test_summary_takes_title_description_and_the_main_text() -> None:
    item = summary_module.extract(make_page(ARTICLE_PAGE))
    assert item == {
        "url": URL,
        "title": "Ten ways to crawl politely | Example Blog",
        "description": "How a crawler keeps to its per-host limits.",
        "text": "Ten ways to crawl politely First, read robots.txt. Second, back off on 429.",
    }


def test_summary_falls_back_to_article_then_body_and_to_open_graph() -> None:
    article = summary_module.extract(make_page(
        '<meta property="og:description" content="og text"><nav>menu</nav>'
        "<article><p>the story</p></article><div>sidebar</div>"
    ))
    assert article["description"] == "og text" and article["text"] == "the story" and article["title"] is None
    body = summary_module.extract(make_page("<body><nav>menu</nav><div>only<br>body</div><footer>f</footer>"))
    assert body["text"] == "only body" and body["description"] is None


def test_summary_caps_the_text() -> None:
    item = summary_module.extract(make_page("<main>" + "<p>word</p>" * 10_000 + "</main>"))
    assert item["text"] is not None and len(item["text"]) <= summary_module.MAX_TEXT_CHARS


@pytest.mark.parametrize(
    "text",
    ["", "   ", "not html at all", "<frameset><frame src=a></frameset>", "<title></title>",
     bytes(range(256)).decode("latin-1"), bytes(range(128, 256)).decode("utf-8", "surrogateescape"),
     "<main><nav><script>x</script></nav></main>", "<" * 5_000, "<meta name=description>"],
)
def test_summary_never_raises(text: str) -> None:
    item = summary_module.extract(make_page(text))
    assert set(item) == {"url", "title", "description", "text"} and isinstance(item["text"], str)


# --- ItemWriter -----------------------------------------------------------------------------

def read_items(directory: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def test_items_are_written_as_json_lines_and_rotated_by_size(tmp_path: Path) -> None:
    lines = [json.dumps({"url": f"http://a.test/{i}", "text": "é" * 40}, ensure_ascii=False) for i in range(30)]
    writer = ItemWriter(tmp_path / "items", node_id="node-1", max_file_bytes=1_000)
    assert writer.files == []  # no file until there is an item
    assert writer.write(lines[:10]) == 10
    assert writer.write(lines[10:]) == 20
    writer.close()
    assert read_items(tmp_path / "items") == [json.loads(line) for line in lines]
    assert len(writer.files) > 2 and all(path.name.startswith("node-1-") for path in writer.files)
    assert all(path.stat().st_size < 1_000 + 200 for path in writer.files)
    assert writer.items_written == 30
    assert writer.bytes_written == sum(path.stat().st_size for path in writer.files)
    with pytest.raises(ValueError, match="closed"):
        writer.write(lines[:1])


def test_a_torn_last_line_is_cut_when_a_writer_starts(tmp_path: Path) -> None:
    first = ItemWriter(tmp_path, node_id="node-1")
    first.write(['{"url":"http://a.test/1"}', '{"url":"http://a.test/2"}'])
    first.flush()
    [path] = first.files
    with open(path, "ab") as handle:  # what a SIGKILL mid-write leaves
        handle.write(b'{"url":"http://a.te')
    second = ItemWriter(tmp_path, node_id="node-1")
    second.write(['{"url":"http://a.test/3"}'])
    second.close()
    assert second.files[0] != path  # a new file; the old one is never appended to
    assert [item["url"] for item in read_items(tmp_path)] == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]


def test_a_line_with_a_newline_is_refused_and_its_batch_not_written(tmp_path: Path) -> None:
    writer = ItemWriter(tmp_path, node_id="node-1")
    with pytest.raises(ValueError, match="one line"):
        writer.write(['{"ok":1}', '{"a":\n1}'])
    writer.close()
    assert writer.items_written == 0 and read_items(tmp_path) == []
