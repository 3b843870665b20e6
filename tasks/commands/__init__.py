"""The ``tool-boundary`` commands, by concern; ``tasks.cli`` assembles them into the console
script (and handles Ctrl-C and unexpected errors)."""
