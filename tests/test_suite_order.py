"""The suite's own scheduling and coverage hooks (tests/conftest.py): the longest tests run first,
and a Hypothesis test measures coverage for its first examples only, every example still running."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

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


class _Controller:
    def __init__(self) -> None:
        self.started, self.log = True, []

    def pause(self) -> None:
        self.started = False
        self.log.append("pause")

    def resume(self) -> None:
        self.started = True
        self.log.append("resume")


def _given_item(controller: _Controller, calls: list[bool]) -> SimpleNamespace:
    def inner(x: int) -> None:
        calls.append(controller.started)

    plugin = SimpleNamespace(cov_controller=controller)
    config = SimpleNamespace(pluginmanager=SimpleNamespace(getplugin=lambda name: plugin))
    return SimpleNamespace(obj=SimpleNamespace(hypothesis=SimpleNamespace(inner_test=inner)), config=config)


def test_a_hypothesis_test_is_covered_for_its_first_examples_and_runs_all() -> None:
    controller, calls = _Controller(), []
    item = _given_item(controller, calls)
    inner = item.obj.hypothesis.inner_test
    hook = conftest.pytest_runtest_call(item)  # type: ignore[arg-type]
    next(hook)
    for x in range(COVERED_EXAMPLES + 20):
        item.obj.hypothesis.inner_test(x)
    with contextlib.suppress(StopIteration):
        hook.send(None)
    assert calls == [True] * COVERED_EXAMPLES + [False] * 20
    assert controller.log == ["pause", "resume"] and controller.started
    assert item.obj.hypothesis.inner_test is inner


def test_a_short_hypothesis_test_is_covered_throughout() -> None:
    controller, calls = _Controller(), []
    item = _given_item(controller, calls)
    hook = conftest.pytest_runtest_call(item)  # type: ignore[arg-type]
    next(hook)
    for x in range(COVERED_EXAMPLES):
        item.obj.hypothesis.inner_test(x)
    with contextlib.suppress(StopIteration):
        hook.send(None)
    assert calls == [True] * COVERED_EXAMPLES and controller.log == []


def test_a_covered_sample_measures_one_item_in_every_and_takes_all() -> None:
    controller = _Controller()
    request = SimpleNamespace(config=_given_item(controller, []).config)
    fixture = conftest.covered_sample.__wrapped__(request)  # type: ignore[attr-defined]
    sample = next(fixture)
    seen = [(item, controller.started) for item in sample(range(6), 3)]
    assert seen == [(0, True), (1, False), (2, False), (3, True), (4, False), (5, False)]
    assert controller.started and controller.log == ["pause", "resume"] * 2  # measured after the loop
    for item in sample(range(3), 3):  # left early: measured again at the end of the test
        if item == 1:
            break
    assert not controller.started
    with contextlib.suppress(StopIteration):
        next(fixture)
    assert controller.started and controller.log == ["pause", "resume"] * 3
