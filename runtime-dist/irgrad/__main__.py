"""``python -m irgrad`` in the runtime-only install: its ``irgrad`` command (inspect, run)."""
from .artifact_cli import main

main()
