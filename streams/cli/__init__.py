"""The ``solaris`` command line."""
