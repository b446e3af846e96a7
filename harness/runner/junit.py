"""JUnit XML from the runner's entries: a testcase per test and one per failing subtest."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from harness.runner.results import Entry
from harness.shared.status import Status

__all__ = ["build", "write_junit", "first_line"]


def first_line(text: str) -> str:
    """The exception line of a traceback, else its first line (at most 500 characters)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error" in ln or "Exception" in ln or "Failure" in ln) and not ln.startswith((" ", "Stdout", "Stderr")):
            return ln.strip()[:500]
    return (lines[0].strip() if lines else "")[:500]


def _own_text(e: Entry) -> str:
    """The failure texts of the test itself (not of its subtests)."""
    return "\n\n".join(p.text for p in e.problems if p.title == e.test_id)


def _result(e: Entry) -> list[Any]:
    from junitparser import Error, Failure, Skipped

    first = e.problems[0].text if e.problems else ""
    if e.status in (Status.FAILED, Status.XPASS):
        msg = (f"{len(e.sub_failed)} of {e.subtests} subtests failed"
               if e.sub_failed and not any(p.title == e.test_id for p in e.problems) else first_line(first))
        res = Failure(msg, "AssertionError" if e.status == Status.FAILED else "UnexpectedSuccess")
        res.text = _own_text(e) or msg
    elif e.status == Status.INTERRUPTED:
        res = Error(e.problems[-1].text if e.problems else "interrupted", "Interrupted")
        res.text = "\n\n".join(p.text for p in e.problems)
    elif e.status == Status.ERROR:
        res = Error(first_line(first), "Error")
        res.text = _own_text(e) or first
    elif e.status == Status.SKIPPED:
        res = Skipped(e.reason.splitlines()[0] if e.reason else "skipped")
    else:
        return []
    return [res]


def _notes(e: Entry) -> str:
    notes = []
    if e.status == Status.XFAIL:  # an expected failure, shown as unittest's are: passed, the reason said here
        notes.append(f"expected failure (xfail){': ' + e.reason if e.reason else ''}")
    if e.status == Status.PASSED and e.reason:  # pytest's non-strict XPASS: a pass, said
        notes.append(e.reason)
    if e.placement:
        notes.append(f"placement: {e.placement}, world size {e.world_size} ({e.why_placed})")
    if e.triage:
        notes.append(f"triage: {e.triage}")
    if e.faults:
        notes.append(f"faults: {e.faults}")
        notes += e.attempts
    if e.subtests:
        notes.append(f"subtests: {e.sub_passed} passed, {len(e.sub_failed)} failed, {len(e.sub_skipped)} skipped")
        notes += [f"  skipped {params}: {why}" for params, why in e.sub_skipped]
    return "\n".join(notes)


def build(entries: Sequence[Entry], wall: float) -> Any:
    """A ``junitparser.JUnitXml``: a test suite per module, a testcase per test (placement and subtests
    in its system-out), and a testcase ``"method (params)"`` per failing subtest.

    Example::

        build(result.entries, wall=12.5).write("junit.xml", pretty=True)
    """
    from junitparser import Error, Failure, JUnitXml, Properties, Property, TestCase, TestSuite

    xml = JUnitXml(name="distharness")
    suites: dict[str, Any] = {}
    for e in entries:
        suite = suites.get(e.module)
        if suite is None:
            suite = suites[e.module] = TestSuite(e.module)
        case = TestCase(e.method, e.classname, round(e.seconds, 3))
        case.result = _result(e)
        notes = _notes(e)
        if notes:
            case.system_out = notes
        if e.triage or e.faults:  # as pytest's record_property writes them: <properties> inside the testcase
            props = Properties()
            if e.triage:
                props.add_property(Property("harness_triage", e.triage))
            if e.faults:
                props.add_property(Property("harness_faults", e.faults))
                props.add_property(Property("harness_attempts", "\n".join(e.attempts)))
            case.append(props)
        suite.add_testcase(case)
        for params, kind, text in e.sub_failed:
            sub = TestCase(f"{e.method} {params}", e.classname, 0.0)
            failed = kind == Status.FAILED
            res = (Failure if failed else Error)(first_line(text), "AssertionError" if failed else "Error")
            res.text = text
            sub.result = [res]
            suite.add_testcase(sub)
    for suite in suites.values():
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    xml.time = round(wall, 3)
    return xml


def write_junit(path: str, entries: Sequence[Entry], wall: float) -> None:
    """Write :func:`build`'s XML to ``path``, making its folder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    build(entries, wall).write(path, pretty=True)
