"""Streaming side of SOLARIS: settings, Faust app and agents, simulator, replay, lag, CLI."""
