"""Inside a rank process: its life (``process``), one test as the rank runs it (``task``), the process
group kept from test to test, the state recorded and restored around each test, the GPU, the output
captured, the flight recorder, the debugger's rank half.

May import: harness.shared, harness.testing.
"""
