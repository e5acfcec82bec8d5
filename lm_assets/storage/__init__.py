"""Where things are stored: the storage backend, safe keys, the layout and accounting."""
