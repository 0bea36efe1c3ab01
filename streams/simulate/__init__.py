"""Offline driver of the engine: replays recorded traffic in-process, in event-time order."""
