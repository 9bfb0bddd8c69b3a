"""The model of time and memory every command uses: the training knobs declared once (`training`),
each layer priced on many designs (`layer_costs`) and scheduled (`schedule_problem`), the evaluator
that places them (`evaluator`), one plan's report (`plan_report`), utilisation and energy (`usage`)
and the bottleneck block (`bottleneck`)."""
