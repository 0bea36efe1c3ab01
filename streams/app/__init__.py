"""The demo application: the end-to-end demo, the offline-vs-live comparison and the HTML
report. It sits above the drivers (``streams.live``, ``streams.simulate``) and below the CLI;
``make lint`` checks that layering (import-linter contracts in ``pyproject.toml``)."""
