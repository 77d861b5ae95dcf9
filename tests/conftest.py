import sys
from pathlib import Path

# Tests import helper modules (tests.live_slurm.netns_lab, ...) by package path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
