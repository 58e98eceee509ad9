"""The bad-input matrix as data (tests/test_bad_input.py runs it): for each command, rows of (name, argv, what its
one line must say, a file to write first). runs.py holds the commands that run models and training, tools.py the
commands around them (quantize, bench, serve, and the readers of finished runs)."""
