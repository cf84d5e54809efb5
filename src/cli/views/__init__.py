"""What the commands show: the library's typed results (`rollup.Report`, `rollup.Check`, `rollup.Diff`, Arrow
tables) in, text out, one module per command's output (`report`, `breakdown`, `check`, `diff`, `html`, `jsonl`) over
the shared formats and tables (`formats`, `tables`, `narrow`). No typer here.
"""
