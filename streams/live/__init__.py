"""The live pipeline: Faust workers, the ranker service, replay, lag and coverage monitoring."""
