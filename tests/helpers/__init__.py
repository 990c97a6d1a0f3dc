"""What several test modules share (imported as ``tests.helpers.<module>``; fixtures stay in
conftest.py)."""
