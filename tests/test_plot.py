"""gpubw plot: PNGs from synthetic reports (skipped without matplotlib)."""

from __future__ import annotations

import builtins
from pathlib import Path

import attrs
import pytest

from _writer_reports import full_report, report, sweep_results
from gpubw.errors import UsageError
from gpubw.report_io import dumps
from gpubw.results import Matrix

PNG = b"\x89PNG\r\n\x1a\n"


def _write(tmp_path: Path, rep) -> Path:
    path = tmp_path / "report.json"
    path.write_text(dumps(rep))
    return path


def test_plot_sweep_and_heatmaps(tmp_path: Path) -> None:
    """A report with a sweep, N×N and 1×N matrices renders to a PNG file."""
    pytest.importorskip("matplotlib")
    from gpubw.plot import main

    rep = attrs.evolve(full_report(), testcases=[*full_report().testcases, *sweep_results()])
    out = tmp_path / "plot.png"
    assert main([str(_write(tmp_path, rep)), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG


def test_plot_simulated_title(tmp_path: Path) -> None:
    """A simulated report's figure says SIMULATED in its title."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from gpubw import plot
    from gpubw.report_io import load_report, report_from_dict

    rep = report_from_dict(load_report(_write(tmp_path, report(sweep_results(), simulated=True))))
    titles: list[str] = []
    real_close = plt.close

    def spy(fig=None):  # type: ignore[no-untyped-def]
        if fig is not None and fig._suptitle is not None:
            titles.append(fig._suptitle.get_text())
        real_close(fig)

    plt.close = spy
    try:
        assert plot.render(rep, str(tmp_path / "s.png")) == 1
    finally:
        plt.close = real_close
    assert titles and titles[0].startswith("SIMULATED SYSTEM dgx-h200-2")


def test_plot_testcase_filter_and_nothing_to_plot(tmp_path: Path) -> None:
    """-t keeps matching testcases; a report with no results is a UsageError."""
    pytest.importorskip("matplotlib")
    from gpubw.plot import main

    path = _write(tmp_path, full_report())
    out = tmp_path / "one.png"
    assert main([str(path), "-o", str(out), "-t", "device_to_device_latency"]) == 0
    assert out.exists()
    with pytest.raises(UsageError, match="no testcase"):
        main([str(path), "-o", str(out), "-t", "zzz"])
    with pytest.raises(UsageError, match="nothing to plot"):
        main([str(_write(tmp_path, report([]))), "-o", str(out)])
    with pytest.raises(UsageError, match="required"):
        main([str(path)])


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without matplotlib, plot raises a UsageError that says how to install it."""
    from gpubw.plot import main

    real_import = builtins.__import__

    def no_mpl(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    with pytest.raises(UsageError, match=r"pip install 'gpubw\[plot\]'"):
        main([str(_write(tmp_path, full_report())), "-o", str(tmp_path / "x.png")])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dpi", "0"], "--dpi: '0' must be at least 1"),
        (["--dpi", "x"], "--dpi: 'x' is not a whole number"),
        (["-o", "plot.xyz"], "the format 'xyz' is not supported; allowed: .*png"),
    ],
)
def test_plot_bad_dpi_or_format_is_a_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A bad --dpi or an image format matplotlib cannot write is a one-line usage error."""
    pytest.importorskip("matplotlib")
    from gpubw.plot import main

    path = _write(tmp_path, report(sweep_results()))
    argv = [str(path), "-o", str(tmp_path / "plot.png"), *args]
    with pytest.raises(UsageError, match=message):
        main(argv)


@pytest.mark.parametrize(("mkey", "drawn"), [("device_local_copy", False), ("rw", True)])
def test_nominal_line_only_for_read_write_figures(mkey: str, drawn: bool) -> None:
    """The read+write nominal bandwidth line is drawn only on a matrix counted read + write
    (Matrix.bytes_counting, not its key or notes); the L2 line on every matrix of a testcase
    that measures device memory (one of its matrices is counted read + write)."""
    pytest.importorskip("matplotlib")
    from gpubw.plot import _draw_sweep, _pyplot

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
    from gpubw.plot import _draw_sweep, _pyplot

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
    from gpubw.plot import _draw_sweep, _pyplot

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


# -- input robustness (issue 13 item 5) ----------------------------------------------------
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[]", "is not a gpubw report"),
        ("{}", "is not a gpubw report"),
        ('{"testcases": "x"}', "is not a gpubw report"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"testcases": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("not json", "not JSON"),
    ],
)
def test_plot_bad_reports_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    """A report of the wrong shape, an empty or a deeply nested one: one line, exit 2 (a deep
    one was a RecursionError traceback, a wrong shape a multi-line exit 1)."""
    pytest.importorskip("matplotlib")
    from gpubw.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert main(["plot", str(bad), "-o", str(tmp_path / "p.png")]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0]
    assert not (tmp_path / "p.png").exists()


def test_plot_names_what_it_leaves_out_and_flags_nan_and_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Testcases that did not pass are named on stderr; NaN and zero cells are flagged and
    drawn as N/A, not as figures (both were silently dropped or drawn)."""
    pytest.importorskip("matplotlib")
    from gpubw.plot import main, screen

    rep = full_report()
    first = next(t for t in rep.testcases if t.matrices)
    m = first.matrices[0]
    n = len(m.column_labels)
    broken = attrs.evolve(m, values=[[float("nan"), *([0.0] * (n - 1))], *m.values[1:]])
    rep = attrs.evolve(
        rep,
        testcases=[attrs.evolve(first, matrices=[broken, *first.matrices[1:]]), *rep.testcases[1:]],
    )
    screened, notes = screen(rep)
    assert any(note.startswith("not drawn: ") and "(Error)" in note for note in notes), notes
    assert any("(Waived)" in note and "bogus (Not Found)" in note for note in notes), notes
    assert any(f"flagged: {m.key}" in note and f"has {n} NaN" in note for note in notes), notes
    cleaned = next(t for t in screened.testcases if t.key == first.key).matrices[0]
    assert list(cleaned.values[0]) == [None] * n
    path = tmp_path / "r.json"
    path.write_text(dumps(rep).replace("NaN", "0.0"))  # JSON reports hold no NaN
    assert main([str(path), "-o", str(tmp_path / "p.png")]) == 0
    err = capsys.readouterr().err
    assert "gpubw plot: not drawn: " in err and f"gpubw plot: flagged: {m.key}" in err
