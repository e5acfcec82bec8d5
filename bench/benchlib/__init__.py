"""What the bench scripts share: where they write, timing, the labelled crawls, and the crawl builder.

The scripts run as files (`python bench/<script>.py`), so `bench/` is first on their import path and
they import this package as `benchlib`; the tests find it through pytest's `pythonpath`.
"""
