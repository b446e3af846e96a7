#!/usr/bin/env python
"""Summarise JUnit XML as a Markdown table, e.g. for a GitHub Actions job's step summary.

One row per test suite (tests, failures, errors, skipped, time), a total row, then the failing and
erroring test cases with the first lines of their messages. Several files (one per CI shard) are
summarised together.

Example::

    python tools/junit_summary.py test-reports/junit.xml >> "$GITHUB_STEP_SUMMARY"
    python tools/junit_summary.py shard-*/junit.xml --title "CPU, torch 2.13.0" --step-summary
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _suites(path: str):
    from junitparser import JUnitXml, TestSuite

    xml = JUnitXml.fromfile(path)
    if isinstance(xml, TestSuite):  # a file whose root is <testsuite>
        return [xml]
    return list(xml)


def summarise(paths: list[str], title: str, max_failures: int, max_lines: int) -> tuple[str, int]:
    from junitparser import Error, Failure, Skipped

    rows = []
    problems = []
    totals = [0, 0, 0, 0, 0.0]
    for path in paths:
        for suite in _suites(path):
            tests = failures = errors = skipped = 0
            seconds = 0.0
            for case in suite:
                tests += 1
                seconds += float(case.time or 0.0)
                results = case.result or []
                kinds = {type(r) for r in results}
                if any(issubclass(k, Error) for k in kinds):
                    errors += 1
                elif any(issubclass(k, Failure) for k in kinds):
                    failures += 1
                elif any(issubclass(k, Skipped) for k in kinds):
                    skipped += 1
                for r in results:
                    if isinstance(r, (Failure, Error)):
                        problems.append((case, r, "error" if isinstance(r, Error) else "failure"))
            time_attr = suite.time
            seconds = float(time_attr) if time_attr not in (None, "") else seconds
            rows.append((suite.name or Path(path).stem, tests, failures, errors, skipped, seconds))
            for i, v in enumerate((tests, failures, errors, skipped, seconds)):
                totals[i] += v
    bad = totals[1] + totals[2]
    icon = ":x:" if bad else (":white_check_mark:" if totals[0] else ":warning:")
    out = [f"### {icon} {title}", ""]
    out.append(f"{totals[0]} tests: {totals[0] - bad - totals[3]} passed, {totals[1]} failed, {totals[2]} errors, "
               f"{totals[3]} skipped in {totals[4]:.1f} s")
    out += ["", "| suite | tests | failures | errors | skipped | time (s) |", "|---|---:|---:|---:|---:|---:|"]
    for name, tests, failures, errors, skipped, seconds in rows:
        out.append(f"| `{_esc(name)}` | {tests} | {failures} | {errors} | {skipped} | {seconds:.1f} |")
    out.append(f"| **total** | **{totals[0]}** | **{totals[1]}** | **{totals[2]}** | **{totals[3]}** | "
               f"**{totals[4]:.1f}** |")
    if problems:
        out += ["", f"#### Failures and errors ({len(problems)})", ""]
        for case, r, kind in problems[:max_failures]:
            name = f"{case.classname}.{case.name}" if case.classname else case.name
            message = _esc(r.message or "")[:300]
            out.append(f"<details><summary><b>{kind}</b> <code>{_esc(name)}</code>: {message}</summary>")
            out.append("")
            body = (r.text or r.message or "").strip().splitlines()
            shown = body[:max_lines]
            out += ["```", *shown]
            if len(body) > max_lines:
                out.append(f"... {len(body) - max_lines} more lines in the JUnit XML")
            out += ["```", "", "</details>"]
        if len(problems) > max_failures:
            out.append(f"\n... and {len(problems) - max_failures} more")
    if not rows:
        out += ["", ":warning: no test suites in " + ", ".join(paths)]
    return "\n".join(out) + "\n", bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="JUNIT_XML", help="JUnit XML files (e.g. one per shard)")
    p.add_argument("--title", default="Test results", help="heading of the summary")
    p.add_argument("--max-failures", type=int, default=30, help="list at most this many failing test cases")
    p.add_argument("--max-lines", type=int, default=40, help="show at most this many lines of each failure")
    p.add_argument("--step-summary", action="store_true",
                   help="append to the file named by $GITHUB_STEP_SUMMARY (as well as printing)")
    p.add_argument("--fail-on-failures", action="store_true",
                   help="exit 1 when the files record a failure or an error (default: exit 0 whatever they say)")
    args = p.parse_args(argv)
    existing = [x for x in args.paths if os.path.isfile(x)]
    missing = [x for x in args.paths if x not in existing]
    if not existing:
        text = f"### :warning: {args.title}\n\nNo JUnit XML found at {', '.join(missing)} (did the run start?)\n"
        bad = 1
    else:
        text, bad = summarise(existing, args.title, args.max_failures, args.max_lines)
        if missing:
            text += f"\n:warning: missing: {', '.join(missing)}\n"
    sys.stdout.write(text)
    if args.step_summary:
        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target:
            print("--step-summary: GITHUB_STEP_SUMMARY is not set; printed only", file=sys.stderr)
        else:
            with open(target, "a") as f:
                f.write(text + "\n")
    if not existing:
        return 2
    return 1 if (bad and args.fail_on_failures) else 0


if __name__ == "__main__":
    sys.exit(main())
