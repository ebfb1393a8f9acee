"""Sweeps: a grid of config overrides times seeds, run by a local process pool or by Ray.

A sweep file:

    experiment: logicot
    out: runs/sweeps/k_by_seed        # optional; default runs/sweeps/<file stem>
    scale: smoke                      # optional
    set: {train.val_size: 1024}       # optional: fixed overrides for every run
    before:                           # optional: runs the sweep's runs read (a base model), trained first
      - {experiment: strategies_base, scale: calibration, out: runs/strategies_base/calibration}
    cases:                            # optional: settings that go together, crossed with the grid
      - {curriculum.name: log_icot}
      - {curriculum.name: e2e, train.max_steps_per_stage: 2000}
    grid:
      task.k: [4, 8]
    seeds: [0, 1, 2, 3]
    report:                           # optional: what `internalize report` shows
      metrics: [zero_filled_accuracy, samples_to_full_accuracy]
      figures:
        - {x: task.k, y: samples_to_full_accuracy, logx: true, logy: true, fit: power}
        - {x: fidelity, y: alignment, scatter: true, group: objective.name}  # two summary figures
    # or `report: OTHER`: the report block of the sweep OTHER (a name or a path), spelled out there

A `before` run is trained into its `out` directory ahead of the sweep's runs, one at a time, and
skipped once it has finished there (continued from its checkpoint when interrupted); if it fails,
the sweep stops with its error. A sweep and the base it rests on are then one command.

Runs start seed by seed (each point's first seed, then each point's second, ...). Re-running a
sweep skips finished runs, continues interrupted ones from their checkpoints and retries failed
ones; a failing run is recorded with its error and never stops the others.

A sweep whose run directories are gone but whose results table was kept (say, committed beside the
docs) is finished with `--done-from TABLE`: the table's finished rows are copied into the sweep
directory's imported.csv, count as done, and stand in the results table for runs that have not
finished here; only the rest run. Delete imported.csv to run them again.
"""
from __future__ import annotations

from internalize.sweep.execute import (
                                    run_local,
                                    run_one,
                                    run_ray,
                                    run_sweep,
                                    watch_parent,
)
from internalize.sweep.spec import (
                                    TIMING_COLUMNS,
                                    FigureSpec,
                                    ReportSpec,
                                    SweepSpec,
                                    available,
                                    expand,
                                    locate,
                                    point_keys,
                                    read_spec,
)
from internalize.sweep.table import collect, flatten, read_table, stage_columns

__all__ = ["TIMING_COLUMNS", "FigureSpec", "ReportSpec", "SweepSpec", "available", "collect", "expand", "flatten",
           "locate", "point_keys", "read_spec", "read_table", "run_local", "run_one", "run_ray", "run_sweep",
           "stage_columns", "watch_parent"]
