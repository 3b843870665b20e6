"""What the runs' JSON becomes: a run's report and table, summaries over runs, the README's
generated tables, and the statistics they are quoted with (medians, spreads)."""
