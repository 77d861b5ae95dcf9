import sys
from pathlib import Path

# Tests import shared helpers (tests.golden.update, ...) by package path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
