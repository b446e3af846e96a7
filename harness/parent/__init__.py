"""The process the user started: one run, one test's orchestration, the rank pools and the template
they are forked from, hypothesis's examples, the debugger's relay to the terminal.

May import: harness.shared, harness.testing, harness.ranks (a rank's entry point, by name), harness.judging,
harness.torchrun.
"""
