"""The run directory: evidence (run.json, events.jsonl, timeline.csv), plots, HTML, summary, JUnit."""
