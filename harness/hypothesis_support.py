"""Hypothesis profiles, and running a ``@given`` test in the parent so every rank gets the same example."""
from __future__ import annotations

import os
from typing import Any, Callable

from harness.errors import UsageError

__all__ = ["PROFILES", "profile_choice", "profile_name", "choose_profile", "load_profile",
           "is_hypothesis_test", "run_given"]

# name -> settings. ``ci`` is derandomized so two CI runs draw the same examples.
PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 2, "derandomize": True, "database": None},
    "dev": {"max_examples": 5},
    "nightly": {"max_examples": 50},
}
_loaded: str | None = None


def _register() -> None:
    from hypothesis import HealthCheck, Phase, settings

    # The explain phase traces the code the failing examples ran in *this* process: only harness code
    # (the test body runs in the ranks), so its "Explanation" would point at harness lines.
    phases = [p for p in Phase if p.name != "explain"]
    for name, values in PROFILES.items():
        # A distributed example takes far longer than hypothesis's 200 ms deadline, and is run from a
        # parent whose own work is tiny; deadlines and the too-slow check would only produce noise.
        settings.register_profile(name, deadline=None, print_blob=True, phases=phases,
                                  suppress_health_check=[HealthCheck.too_slow], **values)


_chosen: str | None = None  # set by choose_profile (the runner's --hypothesis-profile)


def profile_choice() -> tuple[str, str]:
    """(profile, why): the runner's choice, else ``HYPOTHESIS_PROFILE``, else ``ci`` under CI=true, else
    ``dev``. The one place that default is computed.

    Example::

        profile_choice()    # ("dev", "the default") on a developer's machine
    """
    if _chosen:
        return _chosen, "the runner's --hypothesis-profile"
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"], "HYPOTHESIS_PROFILE"
    if os.environ.get("CI"):
        return "ci", "CI is set"
    return "dev", "the default"


def profile_name() -> str:
    """The profile this run uses (see :func:`profile_choice`)."""
    return profile_choice()[0]


def choose_profile(name: str) -> None:
    """Use profile ``name`` in this process (instead of setting HYPOTHESIS_PROFILE)."""
    global _chosen
    if name not in PROFILES:
        raise UsageError(f"hypothesis profile {name!r} is not one of {', '.join(PROFILES)}")
    _chosen = name


def load_profile() -> str:
    """Load :func:`profile_name` once per process (again when it changed)."""
    global _loaded
    from hypothesis import settings

    name = profile_name()
    if name == _loaded:
        return name
    _register()
    try:
        settings.load_profile(name)
    except Exception:
        known = ", ".join(sorted(settings._profiles)) if hasattr(settings, "_profiles") else ", ".join(PROFILES)
        raise UsageError(f"HYPOTHESIS_PROFILE={name!r} is not a registered profile; use one of {known}") from None
    _loaded = name
    return name


def is_hypothesis_test(fn: Any) -> bool:
    return getattr(getattr(fn, "hypothesis", None), "inner_test", None) is not None


def run_given(fn: Any, test: Any, run_example: Callable[[dict[str, Any]], None]) -> None:
    """Let hypothesis drive ``fn`` in this (parent) process, each example going to ``run_example``.

    Hypothesis documents ``fn.hypothesis.inner_test`` as replaceable; we keep the user's original for
    the ranks (a rank calls it with the example's arguments) and give hypothesis a function that sends
    the example to every rank. Generation and shrinking therefore happen once, here.
    """
    load_profile()
    from hypothesis import HealthCheck
    from hypothesis import settings as hypothesis_settings

    if not getattr(fn, "_hypothesis_internal_settings_applied", False):
        # @given froze the settings that were the default when the module was imported, before the
        # profile was loaded here; without an explicit @settings, the test gets the loaded profile.
        fn._hypothesis_internal_use_settings = hypothesis_settings.default
    else:
        # An explicit @settings inherited hypothesis's 200 ms deadline at import; measured here, in the
        # parent, an example's time includes starting the ranks, so only the harness's timeout applies.
        own = fn._hypothesis_internal_use_settings
        checks = list(own.suppress_health_check)
        if HealthCheck.too_slow not in checks:
            checks.append(HealthCheck.too_slow)
        fn._hypothesis_internal_use_settings = hypothesis_settings(own, deadline=None, suppress_health_check=checks)
    overrides = getattr(fn, "_harness_settings_overrides", None)  # torchrun: no example database
    if overrides:
        fn._hypothesis_internal_use_settings = hypothesis_settings(fn._hypothesis_internal_use_settings, **overrides)
    hyp = fn.hypothesis
    if not hasattr(hyp, "_harness_original_inner"):
        hyp._harness_original_inner = hyp.inner_test

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> None:
        __tracebackhide__ = True
        if args:
            raise UsageError(f"{test.id()}: @given must name its arguments (seed=st.integers()), "
                             "so the same example can be sent to every rank by name")
        run_example(kwargs)

    # hypothesis names the function it calls in "Falsifying example: name(...)": show the test's name
    original = hyp._harness_original_inner
    dispatch.__name__ = getattr(original, "__name__", dispatch.__name__)
    dispatch.__qualname__ = getattr(original, "__qualname__", dispatch.__qualname__)
    hyp.inner_test = dispatch
    fn(test)
