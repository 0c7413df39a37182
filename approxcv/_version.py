"""approxcv's version: a leaf module (checkpoints and the report record it)."""
__version__ = "0.1.0"
