"""The SOLARIS engine as pure logic: history, speculate, verify, embed, aggregate, neighbours,
rank. Faust agents (live) and the simulator (offline) drive the same classes."""
