"""A toy GRPO job on Ray, instrumented with `instrument`: the source of `sample_traces/` and of the end-to-end tests.

Entry point: `python -m examples.grpo_toy.job --help` (see `job.py`); the schedule and the goodput it implies are in
`schedule.py`.
"""
