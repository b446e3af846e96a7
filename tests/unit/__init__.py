"""Fast tests of the harness's pure parts: no processes, well under a second each."""
