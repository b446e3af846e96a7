"""The peer grace: once one rank of a test failed, died or left, how long the others get before they are stopped.

``HARNESS_PEER_GRACE`` is one rule that both worlds follow: the spawned pool (``harness.parent.pool``, where the
parent stops the ranks that overran it) and torchrun's launched ranks (``harness.torchrun.job``, where a rank
waiting at a ``run_subtests`` meeting stops its own test). :class:`PeerGrace` holds, for one test, what
started the grace (a :class:`Trouble`), when it ends, and the words that say so in the report.

Times are ``time.monotonic()`` seconds, passed in (``now``) rather than read here, so that the rule is
the same whoever's clock it runs on.
"""
from __future__ import annotations

import dataclasses

__all__ = ["Trouble", "PeerGrace"]

#: seconds a launched rank waits for its peers' results beyond their time limit and the grace: what they
#: need to post a result once their own watchdog or grace has stopped them
POST_MARGIN = 5.0


@dataclasses.dataclass(frozen=True)
class Trouble:
    """What started the peers' grace: when (``since``), on which rank, what happened there (in words, as
    the report says it after "after ...": ``"rank 1 failed"``), and whether it was a ``run_subtests``
    combination that went wrong (``at_meeting``): then the grace is called off if every rank gets through
    that combination after all (nothing is stuck)."""

    since: float
    rank: int
    what: str
    at_meeting: bool = False


class PeerGrace:
    """HARNESS_PEER_GRACE for one test: ``seconds`` the other ranks get once a :class:`Trouble` started.

    The first trouble counts (later ones during the grace do not move its end).

    Example::

        grace = PeerGrace(5.0)
        grace.start(Trouble(since=10.0, rank=1, what="rank 1 failed"))
        grace.limit(deadline=100.0)              # 15.0: the peers are stopped then, not at the deadline
        grace.over(now=16.0)                     # True
        grace.overran(now=16.0)                  # "still running 6.0 s after rank 1 failed; stopped (...)"
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.trouble: Trouble | None = None

    def __repr__(self) -> str:
        return f"PeerGrace({self.seconds:g}, trouble={self.trouble!r})"

    @property
    def running(self) -> bool:
        """Some rank's trouble started the grace (and no meeting called it off)."""
        return self.trouble is not None

    def start(self, trouble: Trouble) -> None:
        """``trouble`` happened; the grace starts now unless an earlier trouble already started it."""
        if self.trouble is None:
            self.trouble = trouble

    def got_through(self) -> None:
        """Every rank got through a ``run_subtests`` meeting: a combination's trouble stuck nobody."""
        if self.trouble is not None and self.trouble.at_meeting:
            self.trouble = None

    def ends(self) -> float | None:
        """When the grace runs out (None: no trouble)."""
        return None if self.trouble is None else self.trouble.since + self.seconds

    def limit(self, deadline: float) -> float:
        """When the ranks still running are stopped: the test's ``deadline``, or the grace's end if sooner."""
        ends = self.ends()
        return deadline if ends is None else min(deadline, ends)

    def over(self, now: float) -> bool:
        """The grace started and has run out at ``now``."""
        ends = self.ends()
        return ends is not None and now > ends

    def wait_for_results(self, timeout: float) -> float:
        """How long a rank whose own test ended waits for every peer's result: the peers' time limit
        (``timeout``), then the grace, then :data:`POST_MARGIN` for them to post it."""
        return timeout + self.seconds + POST_MARGIN

    # ---- what the report says -------------------------------------------------------------------

    def overran(self, now: float) -> str:
        """Why a rank that ran past the grace was stopped (the pool: the parent stopped it)."""
        assert self.trouble is not None, "overran() needs a trouble"
        return (f"still running {now - self.trouble.since:.1f} s after {self.trouble.what}; stopped "
                "(HARNESS_PEER_GRACE)")

    def stopped_at_meeting(self) -> str:
        """Why a rank that waited at a ``run_subtests`` meeting when the grace ran out was stopped."""
        assert self.trouble is not None, "stopped_at_meeting() needs a trouble"
        return f"stopped while it waited for the other ranks after {self.trouble.what}"

    def never_finished(self, missing: list[int], label: str) -> str:
        """Why a launched rank at a meeting stops its test: ``missing`` ranks never finished the combination
        ``label`` within the grace (they are inside one of its collectives)."""
        assert self.trouble is not None, "never_finished() needs a trouble"
        return (f"rank {', '.join(map(str, missing))} never finished subtest ({label}) within HARNESS_PEER_GRACE "
                f"({self.seconds:g} s) after {self.trouble.what}: it is still inside one of that combination's "
                "collectives; the test stops here")
