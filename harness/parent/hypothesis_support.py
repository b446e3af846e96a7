"""Hypothesis profiles, and running a ``@given`` test in the parent so every rank gets the same example.

The profile is a choice of the run, not of this module: an entry point that takes one (the runner's
``--hypothesis-profile``) gives it to its ``harness.parent.run.Run``, which hands it to :func:`run_given` for
every ``@given`` test; without one, ``HYPOTHESIS_PROFILE`` decides, else ``ci`` under ``CI``, else
``dev`` (:func:`profile_choice`). Nothing is loaded into hypothesis's process-wide default: each test
is given its settings through hypothesis's ``settings`` decorator, so two runs in one process (or a
test that loads a profile of its own) do not change each other's examples.
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

from harness.shared.errors import UsageError

__all__ = ["PROFILES", "profile_choice", "profile_name", "check_profile", "settings_for", "load_profile",
           "is_hypothesis_test", "given_function", "own_deadline", "run_given"]

# name -> settings. ``ci`` is derandomized so two CI runs draw the same examples.
PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 2, "derandomize": True, "database": None},
    "dev": {"max_examples": 5},
    "nightly": {"max_examples": 50},
}

# The settings a test's own @settings may change, which it keeps over the profile's (see settings_for).
# ``deadline`` is not one: the harness always removes it.
_OWN = ("max_examples", "derandomize", "database", "verbosity", "phases", "stateful_step_count",
        "report_multiple_bugs", "suppress_health_check", "print_blob")


@functools.cache
def _register() -> None:
    """Register :data:`PROFILES` with hypothesis, once per process (what the settings decorator inherits)."""
    from hypothesis import HealthCheck, Phase, settings

    # The explain phase traces the code the failing examples ran in *this* process: only harness code
    # (the test body runs in the ranks), so its "Explanation" would point at harness lines.
    phases = [p for p in Phase if p.name != "explain"]
    for name, values in PROFILES.items():
        # A distributed example takes far longer than hypothesis's 200 ms deadline, and is run from a
        # parent whose own work is tiny; deadlines and the too-slow check would only produce noise.
        settings.register_profile(name, deadline=None, print_blob=True, phases=phases,
                                  suppress_health_check=[HealthCheck.too_slow], **values)


def profile_choice(chosen: str | None = None) -> tuple[str, str]:
    """(profile, why): ``chosen`` (the run's, from the runner's --hypothesis-profile), else
    ``HYPOTHESIS_PROFILE``, else ``ci`` under CI=true, else ``dev``. The one place that default is computed.

    Example::

        profile_choice()           # ("dev", "the default") on a developer's machine
        profile_choice("nightly")  # ("nightly", "the runner's --hypothesis-profile")
    """
    if chosen:
        return chosen, "the runner's --hypothesis-profile"
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"], "HYPOTHESIS_PROFILE"
    if os.environ.get("CI"):
        return "ci", "CI is set"
    return "dev", "the default"


def profile_name(chosen: str | None = None) -> str:
    """The profile a run that chose ``chosen`` (None: none) uses (see :func:`profile_choice`)."""
    return profile_choice(chosen)[0]


def check_profile(name: str) -> str:
    """``name``, when it is one of :data:`PROFILES` (a runner's choice); else a UsageError naming them.

    Example::

        Run(hypothesis_profile=check_profile(args.hypothesis_profile))
    """
    if name not in PROFILES:
        raise UsageError(f"hypothesis profile {name!r} is not one of {', '.join(PROFILES)}")
    return name


def _profile(name: str) -> Any:
    """The hypothesis settings registered as profile ``name`` (ours, or one the user registered)."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    _register()
    try:
        return settings.get_profile(name)
    except InvalidArgument:
        raise UsageError(f"HYPOTHESIS_PROFILE={name!r} is not a registered profile; use one of "
                         f"{', '.join(PROFILES)}") from None


def settings_for(own: Any, profile: str) -> Any:
    """The hypothesis settings a ``@given`` test runs with under ``profile``: the profile's, with what the
    test's own ``@settings`` (``own``; None when it has none) changed from hypothesis's defaults on top,
    and never a deadline.

    ``own`` was made when the test's module was imported, from hypothesis's default settings of the time
    (the harness never changes them), so whatever it did not set holds those defaults; they give way to
    the profile (``ci`` derandomizes a test with ``@settings(max_examples=3)`` too). The deadline is
    hypothesis's 200 ms measured here, in the parent, where an example's time includes starting the
    ranks: only the harness's timeout applies.

    Example::

        settings_for(settings(max_examples=3), "ci")    # 3 examples, derandomized, no database, no deadline
    """
    from hypothesis import HealthCheck, settings

    base = _profile(profile)
    if own is None:
        return base
    default = settings.default
    changed = {name: getattr(own, name) for name in _OWN if getattr(own, name) != getattr(default, name)}
    checks = list(changed.get("suppress_health_check", ()))
    checks += [c for c in base.suppress_health_check if c not in checks]
    if HealthCheck.too_slow not in checks:
        checks.append(HealthCheck.too_slow)
    return settings(base, **{**changed, "deadline": None, "suppress_health_check": checks})


def _own_settings(fn: Any) -> Any:
    """The test's own ``@settings``, or None; remembered before the harness gives the test any of its own."""
    try:
        return fn._harness_own_settings
    except AttributeError:
        pass
    # Hypothesis has no public way to read a test's settings: its decorator marks the test with the first
    # attribute and keeps the settings in the second (@given copies both from the function it wraps).
    own = fn._hypothesis_internal_use_settings if getattr(fn, "_hypothesis_internal_settings_applied", False) else None
    fn._harness_own_settings = own
    return own


def _give(fn: Any, wanted: Any) -> None:
    """Make ``wanted`` (hypothesis settings) the settings the ``@given`` test ``fn`` runs with."""
    from hypothesis.errors import InvalidArgument

    if getattr(fn, "_harness_given_settings", None) is wanted:
        return  # given them in an earlier run of this test in this process
    try:
        wanted(fn)  # hypothesis's public way: a settings object is a decorator (@settings(...) above @given)
    except InvalidArgument:
        # Hypothesis takes one @settings per test and refuses a second ("merge their arguments instead"):
        # the test's own (already merged into ``wanted``), or the harness's from an earlier run of the test
        # with other settings. There is no public way to replace them, so the attribute that hypothesis's
        # decorator sets, and @given reads at each call, is set here.
        fn._hypothesis_internal_use_settings = wanted
    fn._harness_given_settings = wanted


def load_profile(name: str | None = None) -> str:
    """Make profile ``name`` (default :func:`profile_name`) hypothesis's process-wide default, with
    hypothesis's ``settings.load_profile``; returns it. For code that runs ``@given`` tests on its own
    (``tools/_upstream_baseline.py`` runs upstream's harness); :func:`run_given` gives each test its settings.

    Example::

        load_profile("ci")    # then @given tests defined from here on draw 2 derandomized examples
    """
    from hypothesis import settings

    name = name or profile_name()
    _profile(name)  # registers ours, and names the profiles when ``name`` is none of them
    settings.load_profile(name)
    return name


def own_deadline(fn: Any) -> float | None:
    """The deadline, in seconds, that the test's own ``@settings(deadline=...)`` sets (None: none, or
    hypothesis's default). The harness measures it on the ranks' work for each example (the slowest
    rank's test, setUp to tearDown), never on a world's start: hypothesis's own deadline stays off.

    Example::

        @settings(deadline=timedelta(seconds=2))   # own_deadline(test) == 2.0
    """
    from hypothesis import settings

    own = _own_settings(given_function(fn))
    if own is None or own.deadline is None or own.deadline == settings.default.deadline:
        return None
    return own.deadline.total_seconds()


def is_hypothesis_test(fn: Any) -> bool:
    return getattr(getattr(fn, "hypothesis", None), "inner_test", None) is not None


def given_function(fn: Any) -> Any:
    """The function ``@given`` made, under the decorators that wrap it (``parametrize``'s generated test
    carries a copy of its attributes, but hypothesis reads its settings from the one it made).

    Example::

        given_function(TestX.test_sum_n_1)    # the @given-wrapped test_sum
    """
    seen = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or not is_hypothesis_test(inner):
            return fn
        fn = inner
    return fn


def run_given(fn: Any, test: Any, run_example: Callable[[dict[str, Any]], None], profile: str | None = None) -> None:
    """Let hypothesis drive ``fn`` in this (parent) process, each example going to ``run_example``.

    ``profile``: the run's choice (``harness.parent.run.Run.hypothesis_profile``); None: :func:`profile_name`.
    Hypothesis documents ``fn.hypothesis.inner_test`` as replaceable; we keep the user's original for
    the ranks (a rank calls it with the example's arguments) and give hypothesis a function that sends
    the example to every rank. Generation and shrinking therefore happen once, here.
    """
    from hypothesis import settings

    from harness.testing.parametrize import PARAMS_ATTR

    given = given_function(fn)  # a generated (parametrized) test wraps the @given one: its settings are that one's
    wanted = settings_for(_own_settings(given), profile_name(profile))
    overrides = getattr(fn, "_harness_settings_overrides", None)  # torchrun: no example database
    if overrides:
        checks = list(wanted.suppress_health_check) + [c for c in overrides.get("suppress_health_check", ())
                                                       if c not in wanted.suppress_health_check]
        wanted = settings(wanted, **{**overrides, "suppress_health_check": checks})
    _give(given, wanted)
    # a generated test passes its case's values along with the example: each rank's copy of the generated
    # test has them, so only the example goes to the ranks (the values need not pickle)
    params = getattr(fn, PARAMS_ATTR, {})
    hyp = fn.hypothesis
    if not hasattr(hyp, "_harness_original_inner"):
        hyp._harness_original_inner = hyp.inner_test

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        if args:
            raise UsageError(f"{test.id()}: @given must name its arguments (seed=st.integers()), "
                             "so the same example can be sent to every rank by name")
        run_example({k: v for k, v in kwargs.items() if k not in params})

    # hypothesis names the function it calls in "Falsifying example: name(...)": show the test's name
    original = hyp._harness_original_inner
    dispatch.__name__ = getattr(original, "__name__", dispatch.__name__)
    dispatch.__qualname__ = getattr(original, "__qualname__", dispatch.__qualname__)
    hyp.inner_test = dispatch
    fn(test)
