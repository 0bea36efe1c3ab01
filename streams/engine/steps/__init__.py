"""One module per pipeline stage: the per-event rules both drivers (simulator, Faust) call."""
