"""The gettext bookkeeping of kvlab's message catalog and of the translated notebooks (maintainers only)."""
