"""``tool-boundary``, the operator's command line: ``main`` assembles the commands (one module
each, by concern) into the console script and handles Ctrl-C and unexpected errors."""
