"""Pictures of a scan a person looks at: PNG files drawn with matplotlib (Agg, no display).

Files (``--formats preview``, and ``blensor preview OUT`` from a folder's npz files, the
same bytes):

- ``preview/range<frame:05d>.png``: the packet's range image, colour-mapped with a
  perceptual colormap (option ``colormap``: viridis by default, or turbo, magma, cividis),
  with a colour bar in metres from the data's smallest to its largest range (its end ticks);
  white where nothing returned. Rows are the sensor's grid rows ordered by their mean
  elevation, highest on top (a LiDAR's lasers by elevation, an image sensor's rows as
  they are); columns in firing order, one pixel each; each row repeated so the image is at
  least 128 pixels tall. A beam with several returns shows its nearest.
- ``preview/intensity<frame:05d>.png``: the intensity (0..1) in the same layout, grey,
  its colour bar 0..1.
- ``preview/bev<frame:05d>.png``: bird's-eye view of the packet in its REP-103 sensor frame
  (x ahead: up, y left: left), ``extent`` m around the sensor (option, 40 m by default) on
  600 x 600 pixels, each pixel coloured by the semantic class of its highest point
  (SemanticKITTI's colours, :data:`~blensor_addon.core.classes.CLASS_COLORS`; white where
  no point fell), with a legend of the classes it shows.
- ``preview/trajectory.png``: the run's trajectory (the sensor's position at each
  packet's start) over the bird's-eye view of the last packet, in that packet's sensor
  frame, the view widened to hold the whole path; rewritten with every packet.

Points: option ``points`` = ``noisy`` (default, what a real sensor records) or ``clean``.
A sensor without a ray grid (a pattern) gets the bird's-eye views only.

Each PNG carries tEXt entries that say what it shows, for tools and tests:
``blensor:picture`` (range, intensity, bev, trajectory), ``blensor:frame``; an image's
``blensor:vmin``, ``blensor:vmax`` (the colour bar's range, its end ticks, m for range),
``blensor:cmap``, ``blensor:image_box`` and ``blensor:bar_box`` (``x0 y0 x1 y1``, PNG
pixels, origin top left, end exclusive), ``blensor:row_repeat``; a bird's-eye view's
``blensor:bev`` (JSON: ``box``, the view's pixels, ``extent`` m, ``metres_per_pixel``)
and ``blensor:legend`` (JSON list of ``[name, id, "#rrggbb", x, y]``: each class and the
centre pixel of its legend swatch). The bytes are the same run to run: fixed size and
dpi, no Software or date entry, matplotlib's own DejaVu fonts.

matplotlib is an optional dependency (``pip install 'blensor[preview]'``; the Blender
extension does not bundle it): without it ``--formats preview`` is refused in one line.
"""
from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...core.axes import ros_sensor_pose, sensor_points
from ...core.classes import CLASS_COLORS, CLASSES, OTHER_COLOR
from ...core.ndtypes import F32, F64, Array, Floating
from ...core.result import ScanResult
from ...core.settings import setting
from ._base import RunInfo, Writer

if TYPE_CHECKING:  # matplotlib is imported when a picture is drawn (an optional extra)
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

#: dots per inch of every figure (sizes are set in pixels)
DPI = 100
#: least height (pixels) of a range or intensity image: rows are repeated up to it
MIN_IMAGE_HEIGHT = 128
#: side (pixels) of a bird's-eye view
BEV_PIXELS = 600
#: colour of a pixel where nothing returned
EMPTY = (255, 255, 255)
#: colormaps offered: perceptually uniform ones, and turbo (smooth, for ranges)
COLORMAPS = ("viridis", "turbo", "magma", "cividis")


@dataclass(frozen=True)
class PreviewOptions:
    """Options of the preview pictures: ``colormap`` of the range image, ``extent`` (m)
    of the bird's-eye view around the sensor, ``points`` (``noisy`` or ``clean``)."""

    colormap: str = setting("viridis", "Preview colormap", "Colormap of the range image", choices=COLORMAPS)
    extent: float = setting(40.0, "Preview extent", "Half the side of the bird's-eye view (m)",
                            lo=1.0, hi=1e4)
    points: str = setting("noisy", "Preview points", "Which ranges and points the pictures show",
                          choices=("noisy", "clean"))


#: :func:`numpy.ma.masked_invalid` (numpy 1.26's stub declares no types): NaN and inf masked
_masked_invalid: Callable[[Array], np.ma.MaskedArray[Any, Any]] = np.ma.masked_invalid


def grid_images(result: ScanResult, noisy: bool = True) -> tuple[F32, F32]:
    """The range (m) and intensity images of a result with a grid: two (rows, cols)
    float32 arrays, NaN where nothing returned; rows ordered by their mean elevation,
    highest first (rows without a return keep their place after those with one); a beam
    with several returns gives its nearest.

    Raises:
        ValueError: the result has no grid (one line).
    """
    rows, cols = result.require_grid("a range image")
    rng = result.range_noisy if noisy else result.range
    assert result.ray_index is not None  # a result with a grid (require_grid)
    beam = result.ray_index.astype(np.int64)
    order = np.lexsort((rng, beam))  # nearest return of each beam first
    first = np.ones(order.size, bool)
    first[1:] = beam[order][1:] != beam[order][:-1]
    pick = order[first]
    row, col = beam[pick] // cols, beam[pick] % cols
    count = np.bincount(row, minlength=rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        elev = np.bincount(row, weights=result.elevation[pick].astype(np.float64), minlength=rows) / count
    elev = np.where(count > 0, elev, -np.inf)
    rank = np.empty(rows, np.int64)
    rank[np.lexsort((np.arange(rows), -elev))] = np.arange(rows)
    out: list[F32] = []
    for src in (rng, result.intensity):
        a = np.full((rows, cols), np.nan, np.float32)
        a[rank[row], col] = src[pick]
        out.append(a)
    return out[0], out[1]


def _figure(width: int, height: int) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig



def _renderer(fig: Figure) -> RendererBase:
    """The Agg renderer of the canvas :func:`_figure` gave ``fig`` (matplotlib's
    ``get_renderer`` declares no types)."""
    get_renderer: Callable[[], RendererBase] = cast("FigureCanvasAgg", fig.canvas).get_renderer
    return get_renderer()


def _axes(fig: Figure, x0: int, y0: int, w: int, h: int) -> Axes:
    """Axes at pixels ``x0, y0`` (top left) of size ``w`` x ``h``, without the frame
    (drawn over the edge pixels it would blend them)."""
    W, H = fig.bbox.width, fig.bbox.height
    ax = fig.add_axes((x0 / W, 1.0 - (y0 + h) / H, w / W, h / H))
    for spine in ax.spines.values():
        spine.set_visible(False)
    return ax


def _png(fig: Figure, text: Mapping[str, object]) -> bytes:
    buf = io.BytesIO()
    meta = {"Software": None, **{k: str(v) for k, v in text.items()}}
    fig.savefig(buf, format="png", dpi=DPI, metadata=meta)
    return buf.getvalue()


def image_png(data: Floating, title: str, label: str, cmap: str, vmin: float, vmax: float,
              text: Mapping[str, object]) -> bytes:
    """A (rows, cols) image (NaN: nothing returned, white) with a colour bar from ``vmin``
    to ``vmax`` (its end ticks), ``cmap`` a matplotlib colormap name; ``text``: further
    PNG tEXt entries. Layout and entries: the module docstring."""
    import matplotlib
    from matplotlib.colors import Normalize
    rows, cols = data.shape
    rep = max(1, -(-MIN_IMAGE_HEIGHT // max(rows, 1)))
    h = rows * rep
    left, top, bottom, gap, bar, right = 60, 30, 40, 12, 16, 80
    fig = _figure(left + cols + gap + bar + right, top + h + bottom)
    ax = _axes(fig, left, top, cols, h)
    # an RGB array (matplotlib takes any colour sequence; its stubs name tuples only)
    bad = cast("tuple[float, float, float]", np.array(EMPTY) / 255.0)
    cm = matplotlib.colormaps[cmap].with_extremes(bad=bad)
    if not vmax > vmin:  # one value (or none): a bar of width 1 m around it
        vmin, vmax = vmin - 0.5, vmax + 0.5
    norm = Normalize(vmin=vmin, vmax=vmax)
    im = ax.imshow(np.repeat(_masked_invalid(data), rep, axis=0), cmap=cm, norm=norm,
                   interpolation="nearest", aspect="auto", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("column", fontsize=8)
    ax.set_ylabel("row (by elevation)", fontsize=8)
    ax.tick_params(labelsize=7)
    cax = _axes(fig, left + cols + gap, top, bar, h)
    cb = fig.colorbar(im, cax=cax)
    cb.set_ticks(cast("Sequence[float]", np.linspace(vmin, vmax, 5)))  # an array, as a sequence
    cb.ax.tick_params(labelsize=7)
    cb.set_label(label, fontsize=8)
    box = (left, top, left + cols, top + h)
    bar_box = (left + cols + gap, top, left + cols + gap + bar, top + h)
    return _png(fig, {**text, "blensor:vmin": repr(float(vmin)), "blensor:vmax": repr(float(vmax)),
                      "blensor:cmap": cmap, "blensor:row_repeat": rep,
                      "blensor:image_box": " ".join(map(str, box)),
                      "blensor:bar_box": " ".join(map(str, bar_box))})


def bev_png(points: Floating, semantic: Array, extent: float, text: Mapping[str, object],
            path: Floating | None = None) -> bytes:
    """Bird's-eye view of ``points`` (N, 3) m in a REP-103 frame (x up, y left) within
    +-``extent`` m, each pixel the colour of its highest point's class (``semantic`` (N,)
    ids), with a legend; ``path`` (K, 2) m: x, y of positions drawn as a line over it.
    Layout and entries: the module docstring."""
    from matplotlib.patches import Patch
    n = BEV_PIXELS
    res = 2.0 * extent / n
    pts = np.asarray(points, np.float64)
    with np.errstate(invalid="ignore"):
        r = np.floor((extent - pts[:, 0]) / res)
        c = np.floor((extent - pts[:, 1]) / res)
    ok = (r >= 0) & (r < n) & (c >= 0) & (c < n)
    cell = (r[ok] * n + c[ok]).astype(np.int64)
    sem = np.asarray(semantic)[ok].astype(np.int64)
    order = np.lexsort((pts[ok, 2], cell))  # per cell, its highest point last
    last = np.ones(order.size, bool)
    last[:-1] = cell[order][1:] != cell[order][:-1]
    top_cell, top_sem = cell[order][last], sem[order][last]
    shown = sorted(set(top_sem.tolist()))
    lut = np.array([CLASS_COLORS.get(k, OTHER_COLOR) for k in shown], np.uint8).reshape(-1, 3)
    img = np.empty((n * n, 3), np.uint8)
    img[:] = EMPTY
    img[top_cell] = lut[np.searchsorted(shown, top_sem)]
    left, top, bottom, legend_w = 60, 30, 45, 170
    fig = _figure(left + n + legend_w, top + n + bottom)
    ax = _axes(fig, left, top, n, n)
    ax.imshow(img.reshape(n, n, 3), interpolation="nearest", aspect="auto",
              extent=(extent, -extent, -extent, extent))
    if path is not None and len(path):
        ax.plot(path[:, 1], path[:, 0], "-", color="black", linewidth=1.2)
        ax.plot(path[-1:, 1], path[-1:, 0], "o", color="black", markersize=4)
        ax.plot(path[:1, 1], path[:1, 0], "s", color="black", markersize=4, fillstyle="none")
        ax.set_xlim(extent, -extent)
        ax.set_ylim(-extent, extent)
    ax.set_title(str(text.get("blensor:title", "")), fontsize=10)
    ax.set_xlabel("y (m, left +)", fontsize=8)
    ax.set_ylabel("x (m, ahead +)", fontsize=8)
    ax.tick_params(labelsize=7)
    names = {v: k for k, v in CLASSES.items()}
    entries = [(names.get(k, str(k)), k, tuple(int(v) for v in lut[i])) for i, k in enumerate(shown)]
    handles = [Patch(facecolor=cast("tuple[float, float, float]", np.array(rgb) / 255.0),  # an RGB array
                     edgecolor="none", label=f"{name} ({k})")
               for name, k, rgb in entries]
    legend = fig.legend(handles=handles, loc="upper left", fontsize=7, frameon=False,
                        bbox_to_anchor=((left + n + 10) / fig.bbox.width, 1.0 - top / fig.bbox.height),
                        handlelength=2.0, handleheight=1.2)
    renderer = _renderer(fig)
    fig.draw(renderer)
    H = fig.bbox.height
    swatches = []
    for (name, k, rgb), h in zip(entries, legend.legend_handles):
        assert h is not None  # a handle of every entry
        bb = h.get_window_extent(renderer)
        centre = (int((bb.x0 + bb.x1) / 2), int(H - (bb.y0 + bb.y1) / 2))
        swatches.append([name, k, "#%02x%02x%02x" % rgb, *centre])
    meta = {k: v for k, v in text.items() if k != "blensor:title"}
    meta["blensor:bev"] = json.dumps({"box": [left, top, left + n, top + n], "extent": extent,
                                      "metres_per_pixel": res})
    meta["blensor:legend"] = json.dumps(swatches)
    return _png(fig, meta)


def packet_pictures(result: ScanResult, options: PreviewOptions | None = None) -> list[tuple[str, bytes]]:
    """The per-packet PNGs of ``result`` (range, intensity: only with a grid; bev) as
    (name relative to the output folder, bytes)."""
    options = options or PreviewOptions()
    noisy = options.points == "noisy"
    f = result.frame
    out: list[tuple[str, bytes]] = []
    if result.has_grid:
        rng, inten = grid_images(result, noisy)
        finite = rng[np.isfinite(rng)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        base = {"blensor:frame": f}
        out.append((f"preview/range{f:05d}.png",
                    image_png(rng, f"range, packet {f}", "range (m)", options.colormap, lo, hi,
                              {**base, "blensor:picture": "range"})))
        out.append((f"preview/intensity{f:05d}.png",
                    image_png(inten, f"intensity, packet {f}", "intensity (0..1)", "gray", 0.0, 1.0,
                              {**base, "blensor:picture": "intensity"})))
    pts = sensor_points(result, noisy, "ros")
    out.append((f"preview/bev{f:05d}.png",
                bev_png(pts, result.semantic, options.extent,
                        {"blensor:frame": f, "blensor:picture": "bev",
                         "blensor:title": f"bird's-eye view by class, packet {f}"})))
    return out


def trajectory_png(result: ScanResult, poses: Sequence[Array],
                   options: PreviewOptions | None = None) -> bytes:
    """``preview/trajectory.png``: the positions of ``poses`` ((4, 4) REP-103 sensor poses
    in the world, in run order) over the bird's-eye view of ``result`` (the last packet),
    in its sensor frame; the view holds +-``extent`` m and the whole path (5 m margin)."""
    options = options or PreviewOptions()
    T = ros_sensor_pose(result)
    inv = np.linalg.inv(T)
    path = np.array([(inv @ np.asarray(p, np.float64)[:, 3])[:2] for p in poses]).reshape(-1, 2)
    extent = max(float(options.extent), float(np.abs(path).max()) + 5.0 if path.size else 0.0)
    pts = sensor_points(result, options.points == "noisy", "ros")
    return bev_png(pts, result.semantic, extent,
                   {"blensor:frame": result.frame, "blensor:picture": "trajectory",
                    "blensor:poses": len(poses),
                    "blensor:title": f"trajectory ({len(poses)} packets) over packet {result.frame}"}, path)


#: keys of a BlenSor npz the pictures need (:func:`result_of_npz`)
NPZ_KEYS = ("timestamp", "range", "range_noisy", "xyz", "xyz_noisy", "semantic", "elevation", "intensity",
            "frame", "frame_time", "frame_of_reference", "sensor_to_world", "grid_shape")


def result_of_npz(path: str | os.PathLike[str]) -> ScanResult:
    """A :class:`ScanResult` with what a BlenSor npz file holds (the npz writer's keys,
    :mod:`.npz`): its per-point fields and frame, pose, grid, frame of reference and axes
    (no capabilities, settings or object table).

    Raises:
        OSError, ValueError, KeyError, zipfile.BadZipFile: not such a file.
    """
    from ...core.result import EXTRA_FIELDS, FIELDS
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    fields = {k: d[k] for k in FIELDS if k in d}
    fields.setdefault("ray_index", None)
    end = d.get("sensor_to_world_end")
    return ScanResult(**fields, frame=int(d["frame"]), frame_time=float(d["frame_time"]),
                      frame_of_reference=str(d["frame_of_reference"]),
                      sensor_to_world=np.asarray(d["sensor_to_world"], np.float64),
                      grid_shape=tuple(int(v) for v in np.atleast_1d(d["grid_shape"])),
                      sensor_type=str(d.get("sensor_type", "rotating")), axes=str(d.get("axes", "blensor")),
                      extra={k: d[k] for k in EXTRA_FIELDS if k in d},
                      sensor_to_world_end=None if end is None else np.asarray(end, np.float64))


def previews_of_folder(out: str | os.PathLike[str], to: str | os.PathLike[str] | None = None,
                       overwrite: bool = False) -> list[Path]:
    """``blensor preview OUT``: the pictures of every ``scan<frame>.npz`` in the output
    folder ``out`` (the npz writer's files), written atomically into ``to`` (default
    ``OUT/pictures``, outside the run's own files, so a later ``--overwrite`` or
    ``--resume`` of the run is not refused) with the names the ``preview`` format gives
    them below ``preview/``; the trajectory over the last packet, its poses every npz's
    ``sensor_to_world``. The same bytes as ``--formats preview`` (default options). A
    folder ``to`` given by the caller that already holds pictures of these names is
    refused unless ``overwrite`` (the default ``OUT/pictures`` is this command's own).

    Returns:
        the paths written, sorted.
    Raises:
        SettingsError (``preview``): matplotlib is not installed; (``OUT``): not a folder
        or without npz files; (the npz file's path): a file numpy cannot read as
        BlenSor's npz; (``--to``): a system folder (:func:`~..outdir.system_folder`), or
        a folder holding a picture of these names without ``overwrite``.
        OSError: a picture could not be written (those written are kept).
    """
    import re
    import zipfile

    from ...core.errors import SettingsError
    from ...core.files import check_regular_file
    from ..atomic import atomic_write_bytes, ensure_folder
    from . import parse_formats
    parse_formats(("preview",))  # matplotlib installed, or the registry's one-line refusal
    folder = Path(out)
    if not folder.is_dir():
        raise SettingsError("OUT", "a BlenSor output folder (a folder holding scan<frame>.npz files)",
                            str(folder))
    npzs = sorted(p for p in folder.iterdir() if re.fullmatch(r"scan\d+\.npz", p.name))
    if not npzs:
        raise SettingsError("OUT", "a BlenSor output folder holding scan<frame>.npz files (blensor scan "
                            "--formats npz)", str(folder))
    def bad(path: Path, exc: BaseException | str) -> SettingsError:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return SettingsError(str(path), "a BlenSor npz file (numpy.load reads it, with the npz writer's "
                             "keys)", reason)

    for path in npzs:  # every file's member list first (cheap): nothing is written for a bad folder
        check_regular_file(str(path), path, "a BlenSor npz file")
        try:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in NPZ_KEYS if k not in z.files]
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise bad(path, exc) from None
        if missing:
            raise bad(path, f"no {missing[0]!r} in it")
    if to is not None:
        from ..outdir import system_folder
        if system_folder(Path(to)) is not None:
            raise SettingsError("--to", "a folder outside the operating system's folders", str(to))
        held = [p.name for p in Path(to).glob("*.png") if p.is_file() and any(
            re.fullmatch(o.removeprefix("preview/"), p.name) for o in PreviewWriter.outputs)]
        if held and not overwrite:
            raise SettingsError("--to", "a folder without pictures of these names (or give --overwrite to "
                                "replace them)", f"{to} (holds {sorted(held)[0]})")
    dest = ensure_folder(Path(to) if to is not None else folder / "pictures")
    written: list[Path] = []
    poses: list[F64] = []
    result: ScanResult | None = None
    for path in npzs:
        try:
            result = result_of_npz(path)
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, EOFError) as exc:
            raise bad(path, exc) from None
        poses.append(ros_sensor_pose(result))
        for name, data in packet_pictures(result):
            atomic_write_bytes(dest / name.removeprefix("preview/"), data)
            written.append(dest / name.removeprefix("preview/"))
    assert result is not None  # npzs is not empty
    atomic_write_bytes(dest / "trajectory.png", trajectory_png(result, poses))
    written.append(dest / "trajectory.png")
    return sorted(written)


class PreviewWriter(Writer):
    """``preview/``: the pictures of the module docstring, per packet and for the run."""

    name = "preview"
    description = ("PNG pictures (matplotlib): range and intensity images with colour bars, bird's-eye view "
                   "by class, the run's trajectory")
    files = ("preview/range<frame:05d>.png, preview/intensity<frame:05d>.png, preview/bev<frame:05d>.png, "
             "preview/trajectory.png")
    outputs = (r"preview/(range|intensity|bev)\d+\.png", r"preview/trajectory\.png")
    Options = PreviewOptions
    options: PreviewOptions
    requires = ("matplotlib",)
    #: how to install what ``requires`` names (an optional extra: the refusal says it)
    install = "pip install 'blensor[preview]'"
    multi_frame = True  # trajectory.png shows every packet's pose

    def __init__(self, folder: Path, options: object | None = None, run: RunInfo | None = None) -> None:
        super().__init__(folder, options, run)
        self._poses: list[F64] = []
        self._pending: list[F64] = []

    def frame_files(self, result: ScanResult) -> list[tuple[str, bytes]]:
        poses = self._poses + [ros_sensor_pose(result)]
        self._pending = poses
        return packet_pictures(result, self.options) + [("preview/trajectory.png",
                                                         trajectory_png(result, poses, self.options))]

    def append(self, result: ScanResult) -> None:
        self._poses = self._pending


WRITER = PreviewWriter
