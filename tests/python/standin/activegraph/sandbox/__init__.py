"""The stand-in's sandbox package: only the trial child (_child.py)."""
