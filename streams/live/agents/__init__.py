"""The Faust agents: each module decodes, loads state from its table, calls an engine step,
writes the store, sends downstream and saves state — no business rules of its own."""
