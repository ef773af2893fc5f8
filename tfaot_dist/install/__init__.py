"""The installer: setup, removal and repair of packages from a channel in a user area (setup_area.py), what a
package may install (ownership.py), and the one writer of the area's files (area.py)."""
