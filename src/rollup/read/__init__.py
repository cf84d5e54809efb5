"""Reading trace files: one module per input shape, and the plan that runs them (see `rollup`)."""
