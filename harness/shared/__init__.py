"""What every side of a run shares: the settings, the vocabulary of outcomes and errors, the messages
between the parent and its ranks, where ranks run, what a world is, the peer grace, the launcher's facts.

May import: imports nothing else of harness (the standard library and torch only).
"""
