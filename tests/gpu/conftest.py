"""Shared set-up of the GPU tests: the emulation's helpers are importable as modules."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
