"""``tool-boundary demo``: the scripted run (``script``), its long calls (``long_calls``), how
a terminal shows it (``terminal``) and the web view it may serve (``browser``)."""
