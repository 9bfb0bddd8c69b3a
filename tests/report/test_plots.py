"""The plot helpers on hand-made data: best throughput per design, Pareto front, layer runs."""

from __future__ import annotations

from pathlib import Path

from phazec.report.plots import DesignPoint, design_points, layer_runs, pareto_front

HEADER = "design,area_mm2,feasible,throughput_samples_per_s\n"


def test_design_points_keep_the_best_feasible_throughput(tmp_path: Path) -> None:
    path = tmp_path / "explored.csv"
    path.write_text(
        HEADER
        + "3,2.5,True,10.0\n3,2.5,True,30.0\n3,2.5,False,\n1,1.0,False,\n1,1.0,False,\n0,4.0,True,5.0\n"
    )
    assert design_points(path) == [
        DesignPoint(0, 4.0, 5.0),
        DesignPoint(1, 1.0, 0.0),
        DesignPoint(3, 2.5, 30.0),
    ]


def test_pareto_front_drops_dominated_and_infeasible_designs() -> None:
    points = [
        DesignPoint(0, 1.0, 0.0),  # nothing fits
        DesignPoint(1, 2.0, 10.0),
        DesignPoint(2, 3.0, 8.0),  # more area, less throughput than 1
        DesignPoint(3, 3.0, 12.0),
        DesignPoint(4, 5.0, 12.0),  # ties 3 with more area
        DesignPoint(5, 6.0, 20.0),
    ]
    assert [p.design for p in pareto_front(points)] == [1, 3, 5]


def test_layer_runs_group_consecutive_layers() -> None:
    assert layer_runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 2), (9, 1)]
    assert layer_runs([]) == []
