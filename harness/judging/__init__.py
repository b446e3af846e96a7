"""From the ranks' results to one verdict and its words: the verdict, the report into unittest's
outcomes, the run's notes, the collectives' analysis, what "needs CUDA" means, triage's findings.
Pure decisions over data: it starts no process.

May import: harness.shared.
"""
