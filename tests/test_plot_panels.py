"""gpubw.tools.plot_panels: what each panel draws (skipped without matplotlib)."""

from __future__ import annotations

import attrs
import pytest

from _writer_reports import report, sweep_results
from gpubw.model.results import BANDWIDTH, Axes, Matrix


@pytest.mark.parametrize(("mkey", "drawn"), [("device_local_copy", False), ("rw", True)])
def test_nominal_line_only_for_read_write_figures(mkey: str, drawn: bool) -> None:
    """The read+write nominal bandwidth line is drawn only on a matrix counted read + write
    (Matrix.bytes_counting, not its key or notes); the L2 line on every matrix of a testcase
    that measures device memory (one of its matrices is counted read + write)."""
    pytest.importorskip("matplotlib")
    from gpubw.tools.plot import _pyplot
    from gpubw.tools.plot_panels import _draw_sweep

    def pair(m: Matrix) -> list[Matrix]:
        once = attrs.evolve(m, notes=(), bytes_counting="once")
        return [once, attrs.evolve(once, key="rw", bytes_counting="read+write")]

    results = [attrs.evolve(t, matrices=pair(t.matrices[0])) for t in sweep_results()]
    rep = report(results)
    per_size = [(t.size, m) for t in results for m in t.matrices if m.key == mkey]
    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        _draw_sweep(ax, "device_local_copy", mkey, per_size, rep)
        labels = [line.get_label() for line in ax.get_lines()]
    finally:
        plt.close(fig)
    assert any(label.startswith("nominal memory bandwidth") for label in labels) is drawn
    assert any(label.startswith("L2 cache") for label in labels)


def test_no_reference_lines_without_a_read_write_matrix() -> None:
    """A sweep with no read + write matrix (e.g. a host copy) gets no nominal or L2 line,
    whatever its key."""
    pytest.importorskip("matplotlib")
    from gpubw.tools.plot import _pyplot
    from gpubw.tools.plot_panels import _draw_sweep

    results = [
        attrs.evolve(t, matrices=[attrs.evolve(m, bytes_counting="once") for m in t.matrices])
        for t in sweep_results()
    ]
    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        _draw_sweep(
            ax,
            "device_local_copy",
            "device_local_copy",
            [(t.size, t.matrices[0]) for t in results],
            report(results),
        )
        labels = [str(line.get_label()) for line in ax.get_lines()]
    finally:
        plt.close(fig)
    assert not [lb for lb in labels if lb.startswith(("nominal memory", "L2 cache"))]


def test_l2_line_sits_where_the_working_set_fills_l2() -> None:
    """With working_set_bytes = 3 x the buffer, the L2 line is drawn at L2 / 3."""
    pytest.importorskip("matplotlib")
    from gpubw.tools.plot import _pyplot
    from gpubw.tools.plot_panels import _draw_sweep

    results = [
        attrs.evolve(
            t,
            matrices=[
                attrs.evolve(
                    m,
                    notes=(("working_set_bytes", 3 * (t.size or 0)),),
                    bytes_counting="read+write",
                )
                for m in t.matrices
            ],
        )
        for t in sweep_results()
    ]
    rep = report(results)
    plt = _pyplot()
    fig, ax = plt.subplots()
    try:
        _draw_sweep(
            ax,
            "device_local_copy",
            "device_local_copy",
            [(t.size, t.matrices[0]) for t in results],
            rep,
        )
        l2 = [line for line in ax.get_lines() if line.get_label().startswith("L2 cache")]
        assert l2 and l2[0].get_xdata()[0] == pytest.approx(rep.devices[0]["l2_bytes"] / 3)
        assert "working set 3 x buffer" in l2[0].get_label()
    finally:
        plt.close(fig)


def test_line_and_axis_labels_follow_the_matrix_axes() -> None:
    """A line is named by the column of a one-row matrix (GPU 3, rank 3) or row, arrow,
    column with the matrix's own arrow; axis titles say what the labels number."""
    from gpubw.tools.plot_panels import _cell_label, axis_title

    def m(rows: int, axes: Axes | None = None, head: str = "") -> Matrix:
        labels = [str(i) for i in range(4)]
        return Matrix("k", head, BANDWIDTH, labels[:rows], labels, [[1.0] * 4] * rows, axes=axes)

    assert _cell_label(m(1, head="memcpy CE CPU(row) -> GPU(column)"), 0, 3) == "GPU 3"
    assert _cell_label(m(1, Axes("none", "rank")), 0, 3) == "rank 3"
    assert _cell_label(m(1, Axes("none", "none")), 0, 3) == "3"
    assert _cell_label(m(4, head="memcpy CE GPU(row) -> GPU(column)"), 1, 2) == "1→2"
    assert _cell_label(m(4, Axes("gpu", "gpu", "column->row")), 1, 2) == "1←2"
    assert _cell_label(m(4, Axes("rank", "rank", "both")), 1, 2) == "1↔2"
    assert (axis_title("column", "gpu"), axis_title("row", "rank")) == (
        "column (GPU)",
        "row (rank)",
    )
    assert axis_title("row", "none") == "row"
