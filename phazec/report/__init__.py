"""What the commands print and write from result data: tables, plots, the Gantt chart, result.json's
records and explored.csv (`records`), a sweep's comparison."""
