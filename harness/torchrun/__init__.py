"""Running as one rank of a torchrun job: the launched world as a transport (results and meetings
through torchrun's store), rank 0 judging and reporting. Each process is a rank and its own parent.

May import: harness.shared, harness.testing, harness.ranks, harness.judging.
"""
