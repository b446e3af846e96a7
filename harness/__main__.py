"""``python -m harness [PATH|MODULE ...]``: the runner, on the current directory's tests unless given others."""
from harness.runner.cli import console_main

if __name__ == "__main__":
    console_main()
