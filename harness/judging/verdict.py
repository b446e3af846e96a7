"""One test's verdict: its ranks' results and the parent's facts in, a :class:`Verdict` (data) out.

:func:`judge` is the one place a test's outcome is decided, for a spawned pool and for torchrun alike
(its watchdog's report included), as pytest's ``CallInfo`` becomes a ``TestReport``: pass, skip (and
which kind of skip: the test's own, upstream's exit code, "needs CUDA" on CPU or "needs NCCL" on shared
GPUs for want of GPUs, the placement's), failure or error, the root cause, each ``run_subtests``
combination, and the report's lines (their words: harness.judging.report_text). Before the ranks run,
:func:`before_run` decides the skips that need no rank. Nothing here writes or raises: harness.judging.report
renders a Verdict as unittest's outcomes and tells the run's notes what it says. :func:`world_changes` is
the world's half of isolation: what the ranks of one test left altered.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from harness.judging import analysis
from harness.judging import report_text
from harness.judging.fallback import gpu_skip, needs_cuda, needs_nccl, test_line, tried_on_cpu, upstream_skip
from harness.shared.outcome import (BAD, CRASHED, ERROR, FAILED, KILLED, PASSED, SKIPPED, TIMEOUT, XFAIL, RankResult,
                             order_by_cause)
from harness.shared.placement import Placement

__all__ = ["Facts", "Verdict", "SubtestVerdict", "judge", "merge", "before_run", "skipped", "world_changes",
           "OWN", "UPSTREAM", "NEEDS_CUDA", "NEEDS_NCCL", "TRIED_ON_CPU", "PLACEMENT", "over_deadline"]

#: the kinds of skip (Verdict.skip): the test skipped itself; upstream's skip exit code; it hard-codes CUDA
#: and ran on CPU for want of GPUs; it needs NCCL and ran on GPUs its ranks shared for want of them; its
#: placement or world cannot run it at all
OWN, UPSTREAM, NEEDS_CUDA, NEEDS_NCCL, PLACEMENT = "own", "upstream", "needs-cuda", "needs-nccl", "placement"
#: a test that asks for GPUs (skip_if_lt_x_gpu, a world size from the device count) failed on CPU or on the GPUs its
#: ranks shared, where it ran for want of them: a skip that says what happened there, as upstream skips it on such
#: a machine (HARNESS_DEVICE=cpu or cuda-shared, asked for on purpose: a failure)
TRIED_ON_CPU = "tried-on-cpu"


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the parent knows of one run of a test beside its ranks' results: the verdict's other input.

    Example::

        Facts("mod.TestX.test_y", 2, choose_placement(2, 0, "cpu"))
    """

    test_id: str
    world_size: int
    placement: Placement
    module_file: str | None = None  # the test's file: a needs-CUDA skip names its line there
    gpus_asked: int = 0  # skip_if_lt_x_gpu's number (0: none)
    sized_by_devices: bool = False  # its world size follows the device count (testrun.world_size_for's note)
    gpus_found: int = 0  # GPUs this machine has (the note under a failure on too few of them says it)
    altered: tuple[str, ...] = ()  # what the ranks left altered that only fresh ranks undo (world_changes)
    then: str = ""  # what became of those ranks (World.left_altered)
    fail_altered: bool = False  # HARNESS_ENV_CHANGED=fail: a rank that left them altered fails (if it passed)
    triage: str = ""  # what triage found when the failure was checked in fresh ranks (harness.judging.triage)
    drawn: bool = False  # the hypothesis example drew this world size (harness.strategies)
    seed: int | None = None  # the seed every rank was given (HARNESS_SEED), said under a drawn example's failure

    @property
    def fallback(self) -> bool:
        """On CPU only for want of GPUs: errors that mean "needs CUDA" are skips (HARNESS_DEVICE=cpu: failures)."""
        return self.placement.shortfall and self.placement.device_type == "cpu"

    @property
    def asks_for_gpus(self) -> bool:
        """On CPU, or on GPUs the ranks share, for want of the GPUs the test asks for by name (skip_if_lt_x_gpu)
        or by its world size: any failure there is a skip that says what was tried, as upstream skips the test on
        such a machine (HARNESS_DEVICE=cpu or cuda-shared, asked for on purpose: a failure). The one rule for
        both: upstream never ran it there, so a failure there is never worse than upstream's skip."""
        return self.placement.shortfall and bool(self.gpus_asked or self.sized_by_devices)

    @property
    def short_of_gpus(self) -> bool:
        """It asks for more GPUs than its ranks had (CPU, or GPUs they shared): a failure's report says so."""
        if not (self.gpus_asked or self.sized_by_devices):
            return False
        if self.placement.shortfall:
            return True
        return self.placement.shared and max(self.gpus_asked, self.world_size) > self.gpus_found

    @property
    def shared_fallback(self) -> bool:
        """On shared GPUs only for want of one GPU per rank: errors that mean "needs NCCL" are skips."""
        return self.placement.shortfall and self.placement.shared


@dataclasses.dataclass
class SubtestVerdict:
    """One ``run_subtests`` combination, judged."""

    params: dict[str, Any]
    status: str  # PASSED, FAILED, ERROR or SKIPPED
    lines: list[str] = dataclasses.field(default_factory=list)  # a failure's report
    skip: str = ""  # a skip's kind (OWN, NEEDS_CUDA, NEEDS_NCCL)
    reason: str = ""  # a skip's reason
    gpu: bool = False  # a skip that means "needs a GPU or NCCL": the run's needs-CUDA line counts it

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclasses.dataclass
class Verdict:
    """One test's outcome, as data: what harness.judging.report renders and the run's notes record.

    ``status`` is the test's own (its subtests have theirs: a test whose combinations failed one by one
    passes itself); ``lines`` its report, head line first; ``root_rank`` the rank that caused a failure.
    """

    test_id: str
    status: str  # PASSED, FAILED, ERROR, SKIPPED or XFAIL (a rank called pytest.xfail(), none failed)
    lines: list[str] = dataclasses.field(default_factory=list)
    root_rank: int | None = None
    skip: str = ""  # a skip's kind (OWN, UPSTREAM, NEEDS_CUDA, NEEDS_NCCL, PLACEMENT)
    reason: str = ""  # a skip's or an xfail's reason
    #: a failure's root exception: its class and bases, ``module.qualname`` each (an xfail mark's ``raises=``)
    root_types: tuple[str, ...] = ()
    gpu: bool = False  # a skip that means "needs a GPU or NCCL": the run's needs-CUDA line counts it
    subtests: list[SubtestVerdict] = dataclasses.field(default_factory=list)
    #: the subtests are reported one by one (False under a hypothesis example: their failures are in ``lines``)
    individually: bool = True
    abort: bool = False  # a crash or hang under hypothesis: not to be run again to shrink the example
    shown: list[tuple[int, str]] = dataclasses.field(default_factory=list)  # (rank, output) printed beside it

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def fails(self) -> bool:
        """A failure, of the test or of one of its subtests: what harness.judging.triage checks in fresh ranks."""
        return self.status in (FAILED, ERROR) or any(s.status in (FAILED, ERROR) for s in self.subtests)


def skipped(test_id: str, reason: str, kind: str = OWN) -> Verdict:
    """A skip of ``kind`` as a verdict; whether it means "needs a GPU or NCCL" is decided here.

    Example::

        skipped("m.T.t", "Need at least 2 CUDA devices").gpu    # True
    """
    return Verdict(test_id, SKIPPED, [reason], skip=kind, reason=reason, gpu=_means_gpu(kind, reason))


def _means_gpu(kind: str, reason: str) -> bool:
    """A skip of ``kind`` for ``reason`` means "needs a GPU or NCCL" (the run's needs-CUDA line counts it)."""
    return kind in (NEEDS_CUDA, NEEDS_NCCL, TRIED_ON_CPU) or gpu_skip(reason)


def before_run(facts: Facts, world_skip: str = "", asked_backend: Any = None, defined_at: str = "") -> Verdict | None:
    """The skip of a test that no rank needs to run (None: run it): its world or placement cannot run it
    (``world_skip``: the worlds' reason), or it asks for NCCL alone (``asked_backend``, the test defined at
    ``defined_at``) where it runs on CPU or shared GPUs for want of GPUs (never a silent run on gloo)."""
    why = world_skip or facts.placement.skip
    if why:
        return skipped(facts.test_id, why, PLACEMENT)
    if not (isinstance(asked_backend, str) and asked_backend.strip().lower() == "nccl"):
        return None
    if facts.fallback:
        return skipped(facts.test_id, f"needs CUDA: asks for backend='nccl' alone ({defined_at})", NEEDS_CUDA)
    if facts.placement.shared:
        return skipped(facts.test_id, f"needs NCCL (one GPU per rank): asks for backend='nccl' alone and the "
                                      f"placement is {facts.placement.label} ({facts.placement.reason}) ({defined_at})",
                       NEEDS_NCCL)
    return None


def judge(results: list[RankResult], facts: Facts, example: dict[str, Any] | None = None,
          show_output: bool = False) -> Verdict:
    """The verdict on one run of a test: its ranks' ``results`` (one per rank, by rank), with ``facts``.

    ``example``: the hypothesis example the ranks ran (None: a plain test). ``show_output``: the ranks'
    output is printed beside the report (HARNESS_SHOW_OUTPUT): once, the root cause's inside its report.

    Example::

        v = judge([RankResult(0, PASSED), RankResult(1, FAILED, "AssertionError", "1 != 2")], facts)
        v.status, v.root_rank, v.lines[0]   # ('failed', 1, 'mod.TestX.test_y [rank 1/2] failed on cpu/gloo: ...')
    """
    results = _failing_altered(results, facts)
    individually = example is None
    bad = [r for r in results if r.status in BAD]
    desync = bool(bad) and all(r.desync for r in bad)
    # Under hypothesis every example's output is printed (the reports of the examples hypothesis tries while
    # shrinking are never shown), and the report leaves it out.
    merged = merge(facts.test_id, results, facts.world_size, facts.placement.label,
                   with_output=individually or not show_output)
    shown: list[tuple[int, str]] = []
    if show_output:
        in_report = merged.root_rank if merged.status in (FAILED, ERROR) and not desync and individually else None
        shown = [(r.rank, r.output) for r in sorted(results, key=lambda r: r.rank)
                 if r.rank != in_report and r.output.strip()]
    subtests = _judge_subtests(results, facts)
    suffix = [] if individually else ["", report_text.example_note(
        example or {}, facts.test_id, facts.module_file, facts.world_size if facts.drawn else None, facts.seed)]
    sub_failures = [s.text for s in subtests if s.status in (FAILED, ERROR)]
    passed = Verdict(facts.test_id, PASSED, subtests=subtests, individually=individually, shown=shown)
    if desync:
        # Stopped because one combination went wrong on one rank while its peers were inside it: that
        # combination's report (root cause first, then where each stuck rank was) says it all.
        if individually:
            return passed
        return dataclasses.replace(passed, status=ERROR, lines=["\n\n".join(sub_failures), *suffix], abort=True)
    if merged.status == SKIPPED:
        return _as_skip(passed, merged.text, OWN)
    if merged.status == XFAIL:
        return dataclasses.replace(passed, status=XFAIL, lines=merged.lines, reason=merged.text)
    if merged.status in (FAILED, ERROR) and merged.root_rank is not None:
        why = _upstream_skip(results)
        if why:
            return _as_skip(passed, why, UPSTREAM)
        root = next(r for r in results if r.rank == merged.root_rank)
        kind, cuda = _needs_cuda(facts, root)
        if cuda:
            return _as_skip(passed, cuda, kind)
        tried = _tried_on_cpu(facts, root)
        if tried:
            return _as_skip(passed, tried, TRIED_ON_CPU)
    if merged.status in (FAILED, ERROR):
        # A crash or a hang is not re-run to shrink it (each try could cost a whole timeout); peers killed after
        # the peer grace, because the root cause failed while they waited for it in a collective, are: that is
        # how most distributed failures end, and each try costs at most the grace.
        abort = not individually and any(r.status in (CRASHED, TIMEOUT) for r in results)
        root_types = next((r.exc_types for r in results if r.rank == merged.root_rank), ())
        return dataclasses.replace(passed, status=merged.status, lines=_annotate(merged.lines, facts) + suffix,
                                   root_rank=merged.root_rank, abort=abort, root_types=tuple(root_types))
    if sub_failures and not individually:
        return dataclasses.replace(passed, status=FAILED, lines=["\n\n".join(sub_failures), *suffix])
    return passed


def over_deadline(passed: Verdict, example: dict[str, Any], facts: Facts, seconds: float, deadline: float) -> Verdict:
    """A hypothesis example that passed on every rank but took its slowest rank ``seconds``, over the test's own
    ``@settings(deadline=...)`` (``deadline`` seconds): a failure, as hypothesis's deadline would make it."""
    line = (f"{facts.test_id}: the example took {seconds * 1000:.0f} ms on its slowest rank, over the test's "
            f"deadline of {deadline * 1000:.0f} ms (@settings(deadline=...); the ranks' work is counted, not the "
            "world's start); raise the deadline, or set deadline=None")
    note = report_text.example_note(example, facts.test_id, facts.module_file,
                                    facts.world_size if facts.drawn else None, facts.seed)
    return dataclasses.replace(passed, status=FAILED, lines=[line, "", note])


def merge(test_id: str, results: list[RankResult], world_size: int, placement: str,
          with_output: bool = True) -> Verdict:
    """Fold the per-rank results (not subtests) into one verdict, root cause first; no skip is judged
    beyond the ranks' own. ``placement`` is its label, e.g. ``cpu/gloo``.

    ``with_output``: the root cause's output is part of the text (the caller then does not print it).
    """
    passed = [r for r in results if r.status == PASSED]
    skips = [r for r in results if r.status == SKIPPED]
    xfails = [r for r in results if r.status == XFAIL]
    bad = [r for r in results if r.status in BAD]
    if not bad:
        if xfails:  # a rank called pytest.xfail() and none failed: the test is an expected failure
            return Verdict(test_id, XFAIL, [report_text.xfailed(xfails, skips, passed, len(results))])
        if skips and len(skips) == len(results):
            reasons = sorted({r.message for r in skips})
            reason = reasons[0] if len(reasons) == 1 else "; ".join(f"rank {r.rank}: {r.message}" for r in skips)
            return Verdict(test_id, SKIPPED, [reason])
        if skips:
            return Verdict(test_id, SKIPPED, [report_text.partly_skipped(skips, passed)])
        return Verdict(test_id, PASSED)
    ordered = order_by_cause(results)
    root = ordered[0]
    dumps = {r.rank: r.collectives for r in results if r.collectives is not None}
    section = analysis.section(dumps, world_size) if dumps else ""
    blame = None
    if dumps and (root.peer_effect or root.status in (TIMEOUT, KILLED)):
        blame = analysis.culprit(dumps, [r.rank for r in results if r.status in (PASSED, SKIPPED, XFAIL)], world_size)
    if blame is not None:
        # The root cause is a rank that ended its test normally while a peer waited for it in a collective it
        # never called: that rank, whatever the peer's error says.
        return Verdict(test_id, ERROR, report_text.blamed(test_id, world_size, placement, results, blame, section,
                                                          with_output), blame[0])
    ended = skips + xfails  # ranks that ended the test on purpose (pytest.skip(), pytest.xfail())
    if ended and all(r.status == KILLED for r in bad):
        # One rank skipped while the others waited for it inside a collective, until the peer grace ran out.
        return Verdict(test_id, ERROR, report_text.skipped_while_waiting(test_id, world_size, placement, ended[0], bad,
                                                                         section, with_output), ended[0].rank)
    lines = report_text.failure(test_id, world_size, placement, root, results, ordered, section, with_output)
    return Verdict(test_id, FAILED if root.status == FAILED else ERROR, lines, root.rank)


def _as_skip(verdict: Verdict, reason: str, kind: str) -> Verdict:
    skip = skipped(verdict.test_id, reason, kind)
    return dataclasses.replace(verdict, status=SKIPPED, lines=skip.lines, skip=kind, reason=reason, gpu=skip.gpu)


def _judge_subtests(results: list[RankResult], facts: Facts) -> list[SubtestVerdict]:
    """Each ``run_subtests`` combination, judged across the ranks that reached it."""
    count = max((len(r.subtests) for r in results), default=0)
    judged = []
    for i in range(count):
        per_rank = [(r.rank, r.subtests[i]) for r in results if len(r.subtests) > i]
        # ranks stopped inside this combination (still in one of its collectives when a peer was done)
        stuck = [r for r in results if len(r.subtests) <= i and r.status in (KILLED, TIMEOUT) and not r.at_meeting]
        first = per_rank[0][1]
        bad = [(rank, s) for rank, s in per_rank if s.status in BAD]
        skips = [(rank, s) for rank, s in per_rank if s.status == SKIPPED]
        if bad or (skips and stuck):
            as_results = [RankResult(rank=rank, status=s.status, exc_type=s.exc_type, message=s.message,
                                     traceback=s.traceback, arrived=float(rank)) for rank, s in per_rank]
            root = order_by_cause(as_results)[0] if bad else next(r for r in as_results if r.status == SKIPPED)
            kind, cuda = _needs_cuda(facts, root) if bad else ("", "")
            if bad and not cuda:
                kind, cuda = TRIED_ON_CPU, _tried_on_cpu(facts, root)
            if cuda:
                judged.append(SubtestVerdict(first.params, SKIPPED, [cuda], skip=kind, reason=cuda,
                                             gpu=_means_gpu(kind, cuda)))
                continue
            lines = report_text.subtest_failure(facts.test_id, facts.world_size, facts.placement.label, first.label,
                                                root, as_results, stuck)
            judged.append(SubtestVerdict(first.params, FAILED if root.status == FAILED else ERROR,
                                         _annotate(lines, facts)))
        elif skips and len(skips) == len(per_rank):
            reason = skips[0][1].message
            judged.append(SubtestVerdict(first.params, SKIPPED, [reason], skip=OWN, reason=reason,
                                         gpu=_means_gpu(OWN, reason)))
        else:
            judged.append(SubtestVerdict(first.params, PASSED))
    return judged


def _annotate(lines: list[str], facts: Facts) -> list[str]:
    """A failure's report with notes under its head line: when the test was written for GPUs and ran on CPU,
    or on GPUs its ranks shared, for want of them, so the reader knows where to look; and what triage found
    when the failure was checked in fresh ranks."""
    notes = []
    if facts.short_of_gpus:
        notes.append(report_text.gpu_note(max(facts.gpus_asked, facts.world_size), facts.gpus_asked,
                                          facts.placement.shared, facts.gpus_found))
    if facts.triage:
        notes.append(f"Triage: {facts.triage}")
    return [*lines[:1], *notes, *lines[1:]] if notes else lines


def _upstream_skip(results: list[RankResult]) -> str:
    """Every rank that did not pass left with one of upstream's skip exit codes: the skip's reason."""
    bad = [r for r in results if r.status in BAD]
    reasons = {upstream_skip(r.exc_type, r.message) for r in bad if not r.peer_effect}
    return reasons.pop() if len(reasons) == 1 and "" not in reasons else ""


def _needs_cuda(facts: Facts, root: RankResult) -> tuple[str, str]:
    """(kind, reason) of the skip when a test on CPU (or shared GPUs) for want of GPUs failed because it
    hard-codes CUDA (or NCCL); ("", "") otherwise."""
    if root.status not in (FAILED, ERROR):
        return "", ""
    if facts.fallback and needs_cuda(root.exc_type, root.message):
        kind, what = NEEDS_CUDA, "CUDA"
    elif facts.shared_fallback and needs_nccl(root.exc_type, root.message):
        kind, what = NEEDS_NCCL, "NCCL (one GPU per rank)"
    else:
        return "", ""
    where = test_line(root.traceback, facts.module_file)
    return kind, f"needs {what}: {root.one_line()}" + (f" ({where})" if where else "")


def _tried_on_cpu(facts: Facts, root: RankResult) -> str:
    """The skip's reason when a test that asks for GPUs went wrong on CPU or on shared GPUs, where it ran for want
    of them ("" when not: it asks for none, the placement was asked for, or what went wrong is the harness's
    HARNESS_ENV_CHANGED=fail)."""
    if not facts.asks_for_gpus or root.exc_type == "EnvChanged":
        return ""
    where = test_line(root.traceback, facts.module_file) if root.traceback else ""
    return tried_on_cpu(max(facts.gpus_asked, facts.world_size), facts.gpus_asked,
                        f"rank {root.rank}: {root.one_line()}", where,
                        shared_gpus=facts.placement.gpus if facts.placement.shared else 0)


# ---- what the ranks of one test left altered ------------------------------------------------------


def world_changes(results: list[RankResult]) -> list[str]:
    """What the ranks of one test left altered, one sentence each, ranks named where not all did.

    ``results`` are the ranks' RankResults: their ``altered`` lists (harness.ranks.isolation, harness.ranks.cuda_state),
    and ``default_group`` (whether the harness's default process group was still there after the test)
    that only the world as a whole can judge: destroyed on some ranks and kept on others, the next test
    would hang in it.
    """
    ranks = sorted(r.rank for r in results)
    by_text: dict[str, list[int]] = {}
    for r in results:
        for text in r.altered or []:
            by_text.setdefault(text, []).append(r.rank)
    changes = [text if sorted(who) == ranks else f"{text} (rank{'s' if len(who) > 1 else ''} "
               f"{', '.join(map(str, sorted(who)))})" for text, who in by_text.items()]
    kept = [r.rank for r in results if r.default_group is True]
    gone = [r.rank for r in results if r.default_group is False]
    if kept and gone:
        changes.append(f"the default process group destroyed on rank{'s' if len(gone) > 1 else ''} "
                       f"{', '.join(map(str, gone))} only")
    return changes


def _failing_altered(results: list[RankResult], facts: Facts) -> list[RankResult]:
    """HARNESS_ENV_CHANGED=fail: the results as judged, the ranks that left the process altered failing (if
    they passed); the ranks' own results are left as they came."""
    if not (facts.fail_altered and facts.altered):
        return results
    culprits = {r.rank for r in results if r.altered or r.default_group is False} or {r.rank for r in results}
    message, traceback = report_text.altered_failure(list(facts.altered), facts.then)
    return [dataclasses.replace(r, status=FAILED, exc_type="EnvChanged", message=message, traceback=traceback)
            if r.rank in culprits and r.status == PASSED else r for r in results]
