"""Generic helpers: files, archives, downloads, YAML, templating, escaping, progress."""
