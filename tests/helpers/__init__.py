"""What the tests share, imported as ``helpers.x`` (pyproject: pytest ``pythonpath = ["tests"]``):
frame and fixture builders, real-server runners and the recorded histories they serve."""
