"""The entry points: the command line, the demo and the in-process graph runner."""
