"""gpubw plot: PNGs from synthetic reports (skipped without matplotlib)."""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from _writer_reports import DEVICES, full_report, report, sweep_results
from gpubw.model.errors import UsageError
from gpubw.model.report_io import dumps
from gpubw.model.results import Matrix

PNG = b"\x89PNG\r\n\x1a\n"


def _pages(path: Path) -> int:
    """How many pages a PDF written by matplotlib has."""
    return len(re.findall(rb"/Type /Page\b(?!s)", path.read_bytes()))


def _write(tmp_path: Path, rep) -> Path:
    path = tmp_path / "report.json"
    path.write_text(dumps(rep))
    return path


def test_plot_sweep_and_heatmaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A report with a sweep, N×N and 1×N matrices renders one PNG per testcase (named
    after -o, the names printed) and the 1×N overview per unit; or the pages of one PDF."""
    pytest.importorskip("matplotlib")
    from gpubw.cli.plot import main

    rep = attrs.evolve(full_report(), testcases=[*full_report().testcases, *sweep_results()])
    out = tmp_path / "plot.png"
    assert main([str(_write(tmp_path, rep)), "-o", str(out)]) == 0
    names = [
        "device_to_device_memcpy_read_ce",
        "device_to_device_bidirectional_memcpy_read_ce",
        "device_to_device_latency_sm",
        "device_local_copy",
        "1xN-bandwidth",
    ]
    printed = capsys.readouterr().out.split()
    assert printed == [str(tmp_path / f"plot-{n}.png") for n in names]
    assert not out.exists()
    for path in printed:
        assert Path(path).read_bytes()[:8] == PNG
    pdf = tmp_path / "plot.pdf"
    assert main([str(_write(tmp_path, rep)), "-o", str(pdf)]) == 0
    assert capsys.readouterr().out == ""
    assert _pages(pdf) == len(names)
    with pytest.raises(UsageError, match="5 figures cannot go to standard output"):
        main([str(_write(tmp_path, rep)), "-o", "-"])


def test_plot_simulated_title(tmp_path: Path) -> None:
    """A simulated report's figure says SIMULATED in its title."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from gpubw.model.report_io import load_report, report_from_dict
    from gpubw.tools import plot

    rep = report_from_dict(load_report(_write(tmp_path, report(sweep_results(), simulated=True))))
    titles: list[str] = []
    real_close = plt.close

    def spy(fig=None):  # type: ignore[no-untyped-def]
        if fig is not None and fig._suptitle is not None:
            titles.append(fig._suptitle.get_text())
        real_close(fig)

    plt.close = spy
    try:
        assert plot.render(rep, str(tmp_path / "s.png")) == [str(tmp_path / "s.png")]
    finally:
        plt.close = real_close
    assert titles and titles[0].startswith("SIMULATED SYSTEM dgx-h200-2")


def test_plot_testcase_filter_and_nothing_to_plot(tmp_path: Path) -> None:
    """-t keeps testcases by key or index, -p by key prefix (as the main command's -t and
    -p: -t was a prefix before); a report with no results is a UsageError."""
    pytest.importorskip("matplotlib")
    from gpubw.cli.plot import main

    path = _write(tmp_path, full_report())
    out = tmp_path / "one.png"
    assert main([str(path), "-o", str(out), "-p", "device_to_device_latency"]) == 0
    assert out.exists()
    out.unlink()
    assert main([str(path), "-o", str(out), "-t", "device_to_device_latency_sm"]) == 0
    assert out.exists()
    index = full_report().testcases[0].index
    assert main([str(path), "-o", str(tmp_path / "i.png"), "-t", str(index)]) == 0
    with pytest.raises(UsageError, match="no testcase"):
        main([str(path), "-o", str(out), "-t", "device_to_device_latency"])  # not a key
    with pytest.raises(UsageError, match="no testcase"):
        main([str(path), "-o", str(out), "-p", "zzz"])
    with pytest.raises(UsageError, match="cannot be combined"):
        main([str(path), "-o", str(out), "-t", "0", "-p", "d"])
    with pytest.raises(UsageError, match="nothing to plot"):
        main([str(_write(tmp_path, report([]))), "-o", str(out)])
    with pytest.raises(UsageError, match="required"):
        main([str(path)])


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without matplotlib, plot raises a UsageError that says how to install it."""
    from gpubw.cli.plot import main

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
        (["--dpi", "100000"], "--dpi: '100000' must be at most 2400"),
        (["-o", "plot.xyz"], "the format 'xyz' is not supported; allowed: .*png"),
    ],
)
def test_plot_bad_dpi_or_format_is_a_usage_error(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """A bad --dpi or an image format matplotlib cannot write is a one-line usage error."""
    pytest.importorskip("matplotlib")
    from gpubw.cli.plot import main

    path = _write(tmp_path, report(sweep_results()))
    argv = [str(path), "-o", str(tmp_path / "plot.png"), *args]
    with pytest.raises(UsageError, match=message):
        main(argv)


def _sweep_report(keys: int, sizes: int, gpus: int = 8):  # type: ignore[no-untyped-def]
    """A simulated report of ``keys`` testcases x ``sizes`` sizes on ``gpus`` GPUs: host
    links (1×N) and peer matrices (N×N), as a sweep of h200x8 has."""
    from _writer_reports import D2D_READ, HEAD_CE
    from gpubw.model.results import BANDWIDTH, Status, TestcaseResult

    labels = [str(i) for i in range(gpus)]
    results = []
    for k in range(keys):
        peer = k % 2 == 1
        for j in range(sizes):
            bw = (390e9 if peer else 55e9) * (1 - 0.5 ** (j + 1))
            values = (
                [[None if r == c else bw for c in range(gpus)] for r in range(gpus)]
                if peer
                else [[bw * (0.8 if c == 3 else 1.0) for c in range(gpus)]]
            )
            m = Matrix(
                key=f"testcase_{k:02d}",
                description=D2D_READ if peer else HEAD_CE,
                unit=BANDWIDTH,
                row_labels=labels if peer else ["0"],
                column_labels=labels,
                values=values,
            )
            results.append(
                TestcaseResult(key=m.key, status=Status.PASSED, size=(1 << 20) << j, matrices=[m])
            )
    devices = [dict(DEVICES[0], ordinal=i) for i in range(gpus)]
    return attrs.evolve(report(results, simulated=True), devices=devices)


def test_a_250_entry_sweep_is_one_figure_per_testcase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """25 testcases x 10 sizes on 8 GPUs: 25 figures (one per testcase, a few panels each),
    not one per entry nor one image of thousands of pixels. What is drawn is what costs the
    time; the time itself is not asserted here (a busy machine would decide it)."""
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from gpubw.tools import plot

    rep = _sweep_report(25, 10)
    assert len(rep.testcases) == 250
    made: list[matplotlib.figure.Figure] = []
    init = matplotlib.figure.Figure.__init__

    def counted(self: matplotlib.figure.Figure, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(matplotlib.figure.Figure, "__init__", counted)
    written = plot.render(rep, str(tmp_path / "sweep.pdf"))
    assert written == [str(tmp_path / "sweep.pdf")]
    assert _pages(tmp_path / "sweep.pdf") == 25
    assert len(made) == 25
    assert all(len(f.axes) <= 3 for f in made)  # the sweep panels of one testcase


def test_two_reports_are_overlaid(tmp_path: Path) -> None:
    """gpubw plot A B: B's sweep lines are drawn dashed over A's, labelled by file name, and
    an N×N matrix gets a ratio A / B heatmap beside A's."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from gpubw.tools import plot

    a, b = _sweep_report(2, 3, gpus=2), _sweep_report(2, 3, gpus=2)
    slower = [
        attrs.evolve(
            t,
            matrices=[
                attrs.evolve(
                    m, values=[[None if v is None else v * 0.9 for v in row] for row in m.values]
                )
                for m in t.matrices
            ],
        )
        for t in b.testcases
    ]
    b = attrs.evolve(b, testcases=slower)
    specs = plot.figures([("new", a), ("old", b)])
    assert [s.name for s in specs] == ["testcase_00", "testcase_01"]
    assert len(specs[1].panels) == 3  # sweep, heatmap, ratio heatmap
    fig, ax = plt.subplots()
    try:
        specs[0].panels[0][2](ax, fig)
        lines = {str(x.get_label()): x for x in ax.get_lines()}
    finally:
        plt.close(fig)
    assert lines["new: GPU 0"].get_linestyle() == "-"
    assert lines["old: GPU 0"].get_linestyle() == "--"
    assert lines["old: GPU 0"].get_color() == lines["new: GPU 0"].get_color()
    assert lines["old: GPU 1"].get_ydata()[0] == pytest.approx(
        0.9 * lines["new: GPU 1"].get_ydata()[0]
    )
    pa, pb = _write(tmp_path, a), tmp_path / "old.json"
    pb.write_text(dumps(b))
    from gpubw.cli.plot import main

    assert main([str(pa), str(pb), "-o", str(tmp_path / "both.pdf")]) == 0
    assert _pages(tmp_path / "both.pdf") == 2


def test_nvbandwidth_json_is_plotted(tmp_path: Path) -> None:
    """nvbandwidth's -j output is accepted, alone or overlaid on a gpubw report."""
    pytest.importorskip("matplotlib")
    import json

    from gpubw.cli.plot import main

    nv = {
        "nvbandwidth": {
            "version": "v0.8",
            "GPU Device list": [
                "0: NVIDIA H200 (00000000:1b:00): (node)",
                "1: NVIDIA H200 (00000000:43:00): (node)",
            ],
            "testcases": [
                {
                    "name": "host_to_device_memcpy_ce",
                    "status": "Passed",
                    "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": [["55.1", "55.4"]],
                    "sum": 110.5,
                },
                {
                    "name": "device_to_device_memcpy_read_ce",
                    "status": "Passed",
                    "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": [["N/A", "394.1"], ["394.0", "N/A"]],
                    "sum": 788.1,
                },
            ],
        }
    }
    path = tmp_path / "nv.json"
    path.write_text(json.dumps(nv))
    assert main([str(path), "-o", str(tmp_path / "nv.pdf")]) == 0
    assert _pages(tmp_path / "nv.pdf") == 2
    assert (
        main([str(_write(tmp_path, full_report())), str(path), "-o", str(tmp_path / "x.pdf")]) == 0
    )


def test_a_testcase_swept_in_one_run_only_is_not_lost() -> None:
    """A 1×N testcase run at one size in the first report and swept in the second is drawn
    as bars; swept in the first, as a sweep: never dropped for being a sweep elsewhere."""
    pytest.importorskip("matplotlib")
    from gpubw.tools import plot

    single = report([attrs.evolve(sweep_results()[-1])])
    specs = plot.figures([("one", single), ("sweep", report(sweep_results()))])
    assert [s.name for s in specs] == ["1xN-bandwidth"]
    specs = plot.figures([("sweep", report(sweep_results())), ("one", single)])
    assert [s.name for s in specs] == ["device_local_copy"]


# -- input robustness (issue 13 item 5, the same checks as robust-input's) -------------------
@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[]", "is not a gpubw report"),
        ("{}", "is not a gpubw report"),
        ('{"testcases": "x"}', "is not a gpubw report"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"testcases": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("not json", "not JSON"),
        ('{"nvbandwidth": 3}', "not nvbandwidth JSON"),
    ],
)
def test_plot_bad_reports_are_one_line_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    """A report of the wrong shape, an empty or a deeply nested one: one line, exit 2."""
    pytest.importorskip("matplotlib")
    from gpubw.cli.command import main

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
    """Failed testcases are named on stderr, Waived ones counted; NaN and zero cells are
    flagged and drawn as N/A, not as figures; with two runs each note says which run."""
    pytest.importorskip("matplotlib")
    from gpubw.cli.plot import main
    from gpubw.tools.plot import screen

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
    assert any("bogus (Not Found)" in note for note in notes), notes
    assert any(n.startswith("not drawn: ") and "Waived testcase(s)" in n for n in notes), notes
    assert not any("(Waived)" in note for note in notes), notes  # counted, not listed
    assert any(f"flagged: {m.key}" in note and f"has {n} NaN" in note for note in notes), notes
    cleaned = next(t for t in screened.testcases if t.key == first.key).matrices[0]
    assert list(cleaned.values[0]) == [None] * n
    path = tmp_path / "r.json"
    path.write_text(dumps(rep).replace("NaN", "0.0"))  # JSON reports hold no NaN
    assert main([str(path), "-o", str(tmp_path / "p.pdf")]) == 0
    err = capsys.readouterr().err
    assert "gpubw plot: not drawn: " in err and f"gpubw plot: flagged: {m.key}" in err
    other = _write(
        tmp_path / "sub" if (tmp_path / "sub").mkdir() is None else tmp_path, full_report()
    )
    assert main([str(path), str(other), "-o", str(tmp_path / "q.pdf")]) == 0
    err = capsys.readouterr().err
    assert "gpubw plot: r: flagged: " in err and "gpubw plot: report: not drawn: " in err
