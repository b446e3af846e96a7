"""The classes whose ranks live in one process: local-tensor (every rank simulated), and the threaded
classes (each rank a thread) with their in-process process group.

May import: harness.shared, harness.testing, harness.ranks, harness.judging, harness.parent, harness.classes.
"""
