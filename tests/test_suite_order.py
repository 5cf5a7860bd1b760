"""The suite's own scheduling and coverage hooks (tests/conftest.py): the longest tests run first,
and a Hypothesis test measures coverage for its first examples only, every example still running."""

from __future__ import annotations

import contextlib
import sys
import threading
from types import SimpleNamespace

from coverage import Coverage

from tests import conftest
from tests.conftest import COVERED_EXAMPLES, ROOT, RUN_FIRST


def test_each_test_run_first_exists() -> None:
    for nodeid in RUN_FIRST:
        path, name = nodeid.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), nodeid


def _item(nodeid: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, keywords={}, add_marker=lambda marker: None)


def test_the_tests_run_first_lead_in_their_order_and_the_others_keep_theirs() -> None:
    others = [_item(f"tests/a/test_{i}.py::test_x[{i}]") for i in range(5)]
    last, first = _item(RUN_FIRST[-1] + "[p]"), _item(RUN_FIRST[0])
    items = [others[0], last, *others[1:3], first, *others[3:]]
    conftest.pytest_collection_modifyitems(SimpleNamespace(getoption=lambda name: False), items)  # type: ignore[arg-type]
    assert items == [first, last, *others]


@contextlib.contextmanager
def _measuring():  # type: ignore[no-untyped-def]
    """A coverage measurement of its own running (above the run's own, under --cov)."""
    cov = Coverage(data_file=None)
    cov.start()
    try:
        yield cov
    finally:
        cov.stop()


def _traced() -> bool:
    return sys.gettrace() is not None


def _given_item(calls: list[bool]) -> SimpleNamespace:
    def inner(x: int) -> None:
        calls.append(_traced())

    return SimpleNamespace(obj=SimpleNamespace(hypothesis=SimpleNamespace(inner_test=inner)))


def _run_examples(count: int) -> tuple[list[bool], bool]:
    calls: list[bool] = []
    item = _given_item(calls)
    inner = item.obj.hypothesis.inner_test
    with _measuring():
        hook = conftest.pytest_runtest_call(item)  # type: ignore[arg-type]
        next(hook)
        for x in range(count):
            item.obj.hypothesis.inner_test(x)
        with contextlib.suppress(StopIteration):
            hook.send(None)
        after = _traced()
    assert item.obj.hypothesis.inner_test is inner
    return calls, after


def test_a_hypothesis_test_is_covered_for_its_first_examples_and_runs_all() -> None:
    calls, after = _run_examples(COVERED_EXAMPLES + 20)
    assert calls == [True] * COVERED_EXAMPLES + [False] * 20 and after


def test_a_short_hypothesis_test_is_covered_throughout() -> None:
    calls, after = _run_examples(COVERED_EXAMPLES)
    assert calls == [True] * COVERED_EXAMPLES and after


def test_a_covered_sample_measures_one_item_in_every_and_takes_all() -> None:
    with _measuring():
        fixture = conftest.covered_sample.__wrapped__()  # type: ignore[attr-defined]
        sample = next(fixture)
        seen = [(item, _traced()) for item in sample(range(6), 3)]
        assert seen == [(0, True), (1, False), (2, False), (3, True), (4, False), (5, False)]
        assert _traced()  # measured again after the loop
        for item in sample(range(3), 3):  # left early: measured again at the end of the test
            if item == 1:
                break
        assert not _traced()
        with contextlib.suppress(StopIteration):
            next(fixture)
        assert _traced()


def test_coverage_is_paused_inside_the_block_also_in_its_threads_and_resumed_after() -> None:
    seen: list[bool] = []
    with _measuring():
        with conftest.coverage_paused():
            seen.append(_traced())
            thread = threading.Thread(target=lambda: seen.append(_traced()))
            thread.start()
            thread.join()
        seen.append(_traced())
    assert seen == [False, False, True]
