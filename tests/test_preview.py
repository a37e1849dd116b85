"""The pictures (``--formats preview``, ``blensor preview OUT``: io/formats/preview.py) and the
run as a recording a viewer opens (the rosbag2 writer's MCAP, read back with the mcap library)."""
from __future__ import annotations

import json
import subprocess
import sys

from pathlib import Path

import numpy as np
import pytest

from conftest import CROSSING
from test_faults import one_error_line, run

pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """The quick start's scene, packets 1-2 (two sweeps), with npz, preview and rosbag2."""
    out = tmp_path_factory.mktemp("preview") / "out"
    res = run("scan", CROSSING, "--frames", "1-2", "--formats", "npz,preview,rosbag2", "--out", out,
              "--quiet")
    assert res.returncode == 0, res.stderr
    return out


def rgb(im, x, y):
    return tuple(im.convert("RGB").getpixel((int(x), int(y))))


def cmap8(name, v):
    import matplotlib
    return tuple(int(c) for c in matplotlib.colormaps[name](v, bytes=True)[:3])  # as imshow rounds


def lut_index(name, colour):
    """The entry of the colormap's 256 nearest to ``colour`` (r, g, b)."""
    lut = np.array([cmap8(name, i / 255) for i in range(256)])
    return int(np.argmin(np.abs(lut - np.array(colour)).sum(axis=1)))


def test_every_packet_has_its_pictures_and_the_run_its_trajectory(scanned):
    names = sorted(p.name for p in (scanned / "preview").iterdir())
    assert names == ["bev00000.png", "bev00001.png", "intensity00000.png", "intensity00001.png",
                     "range00000.png", "range00001.png", "trajectory.png"]
    manifest = json.loads((scanned / "manifest.json").read_text())
    assert "preview/range00001.png" in manifest["frames"][1]["files"]
    for p in (scanned / "preview").iterdir():
        im = Image.open(p)
        assert "Software" not in im.text and "blensor:picture" in im.text  # no version stamp: same bytes


def test_range_colour_bar_spans_the_data_range_and_its_ends_are_the_extreme_pixels(scanned):
    from blensor_addon.io.formats.preview import grid_images, result_of_npz
    for f in (0, 1):
        z = np.load(scanned / f"scan{f:05d}.npz")
        im = Image.open(scanned / "preview" / f"range{f:05d}.png")
        meta = im.text
        # the bar's end ticks are the smallest and largest range of the packet (what a sensor records)
        assert float(meta["blensor:vmin"]) == float(z["range_noisy"].min())
        assert float(meta["blensor:vmax"]) == float(z["range_noisy"].max())
        assert meta["blensor:cmap"] == "viridis"
        x0, y0, x1, y1 = map(int, meta["blensor:image_box"].split())
        rows, cols = (int(v) for v in z["grid_shape"])
        rep = int(meta["blensor:row_repeat"])
        assert (x1 - x0, y1 - y0) == (cols, rows * rep)
        # the bar: its top is the colormap's end, its bottom its start (the colormap's 256 entries
        # over the bar's pixels: within 2 % of the ends, inside the bar's outline)
        bx0, by0, bx1, by1 = map(int, meta["blensor:bar_box"].split())
        top, bottom = rgb(im, (bx0 + bx1) // 2, by0 + 2), rgb(im, (bx0 + bx1) // 2, by1 - 2)
        assert lut_index("viridis", top) >= 250 and lut_index("viridis", bottom) <= 5, (top, bottom)
        # the pixels of the farthest and the nearest return have the bar's end colours; a miss is white
        img, _ = grid_images(result_of_npz(scanned / f"scan{f:05d}.npz"))
        for where, v in ((np.nanargmax(img), 1.0), (np.nanargmin(img), 0.0)):
            r, c = divmod(int(where), cols)
            assert rgb(im, x0 + c, y0 + r * rep + rep // 2) == cmap8("viridis", v)
        r, c = next((r, c) for r, c in np.argwhere(np.isnan(img)) if 0 < r < rows - 1 and 0 < c < cols - 1)
        assert rgb(im, x0 + c, y0 + r * rep + rep // 2) == (255, 255, 255)


def test_intensity_picture_bar_is_zero_to_one(scanned):
    meta = Image.open(scanned / "preview" / "intensity00001.png").text
    bar = (float(meta["blensor:vmin"]), float(meta["blensor:vmax"]), meta["blensor:cmap"])
    assert bar == (0.0, 1.0, "gray")


def test_a_class_pixel_of_the_birds_eye_view_has_its_legend_colour(scanned):
    from blensor_addon.core.axes import sensor_points
    from blensor_addon.core.classes import CLASS_COLORS, CLASSES
    from blensor_addon.io.formats.preview import result_of_npz
    result = result_of_npz(scanned / "scan00001.npz")
    im = Image.open(scanned / "preview" / "bev00001.png")
    bev = json.loads(im.text["blensor:bev"])
    legend = {name: (k, colour, (x, y)) for name, k, colour, x, y in json.loads(im.text["blensor:legend"])}
    pts = sensor_points(result, True, "ros")
    E, res = bev["extent"], bev["metres_per_pixel"]
    r = np.floor((E - pts[:, 0]) / res).astype(np.int64)
    c = np.floor((E - pts[:, 1]) / res).astype(np.int64)
    inside = (r >= 0) & (r < 600) & (c >= 0) & (c < 600)
    cell = r * 600 + c
    checked = 0
    for name in ("car", "road", "building"):
        k, colour, swatch = legend[name]
        assert k == CLASSES[name] and colour == "#%02x%02x%02x" % CLASS_COLORS[k]
        # a pixel where every point is of the class
        of_class = inside & (result.semantic == k)
        others = set(cell[inside & (result.semantic != k)].tolist())
        pure = [i for i in np.flatnonzero(of_class) if cell[i] not in others]
        assert pure, name
        i = pure[len(pure) // 2]
        x, y = bev["box"][0] + c[i], bev["box"][1] + r[i]
        assert rgb(im, x, y) == rgb(im, *swatch) == CLASS_COLORS[k], name
        checked += 1
    assert checked == 3


def test_the_trajectory_picture_draws_every_packet_over_the_last(scanned):
    im = Image.open(scanned / "preview" / "trajectory.png")
    assert im.text["blensor:poses"] == "2" and im.text["blensor:frame"] == "1"
    box = json.loads(im.text["blensor:bev"])["box"]
    # the last position (the last packet's sensor, at its frame's origin) is the black end marker
    assert rgb(im, (box[0] + box[2]) // 2, (box[1] + box[3]) // 2) == (0, 0, 0)


def test_preview_command_makes_the_scans_pictures_byte_for_byte(scanned, tmp_path):
    res = run("preview", scanned, "--to", tmp_path / "pics")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines() == [f"blensor: 7 pictures -> {tmp_path / 'pics'}"]
    for p in (scanned / "preview").iterdir():
        assert (tmp_path / "pics" / p.name).read_bytes() == p.read_bytes(), p.name
    # a second run into a folder of the user's holding those names: refused, nothing replaced
    (tmp_path / "pics" / "trajectory.png").write_bytes(b"mine")
    res = run("preview", scanned, "--to", tmp_path / "pics")
    assert res.returncode == 2 and (tmp_path / "pics" / "trajectory.png").read_bytes() == b"mine"
    assert one_error_line(res).startswith("blensor: error: --to must be a folder without pictures of these "
                                          "names (or give --overwrite to replace them), got"), res.stderr
    res = run("preview", scanned, "--to", tmp_path / "pics", "--overwrite")
    assert res.returncode == 0 and (tmp_path / "pics" / "trajectory.png").read_bytes() != b"mine"
    res = run("preview", scanned, "--to", "/etc/blensor-pictures")
    assert res.returncode == 2 and not Path("/etc/blensor-pictures").exists(), res.stderr


def test_preview_command_refuses_a_folder_without_scans_and_a_bad_npz_in_one_line(scanned, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run("preview", empty)
    assert res.returncode == 2
    assert one_error_line(res) == (f"blensor: error: OUT must be a BlenSor output folder holding "
                                   f"scan<frame>.npz files (blensor scan --formats npz), got '{empty}'")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "scan00000.npz").write_bytes((scanned / "scan00000.npz").read_bytes())
    (bad / "scan00001.npz").write_bytes(b"PK\x03\x04 not a zip at all" * 10)
    res = run("preview", bad)
    assert res.returncode == 2
    line = one_error_line(res)
    assert line.startswith(f"blensor: error: {bad / 'scan00001.npz'} must be a BlenSor npz file"), line
    assert sorted(p.name for p in bad.iterdir()) == ["scan00000.npz", "scan00001.npz"]  # nothing written


def test_without_matplotlib_preview_is_refused_in_one_line(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None; from blensor_addon.cli import main; "
            f"sys.exit(main(['scan', {str(CROSSING)!r}, '--frames', '1', '--formats', 'npz,preview', "
            f"'--out', {str(tmp_path / 'o')!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert one_error_line(res) == ("blensor: error: --formats must be formats whose Python packages are "
                                   "installed (preview needs matplotlib: pip install 'blensor[preview]'), "
                                   "got 'preview'")
    assert not (tmp_path / "o").exists()


def test_the_rosbag2_mcap_is_a_foxglove_ready_ros2_recording(scanned):
    """Foxglove opens an MCAP of profile ros2 with ros2msg schemas and CDR messages; its 3D
    panel places PointCloud2 through /tf and /tf_static. Read back with the mcap library."""
    mcap_reader = pytest.importorskip("mcap.reader")
    decoder = pytest.importorskip("mcap_ros2.decoder")
    with open(scanned / "rosbag2" / "rosbag2.mcap", "rb") as f:
        reader = mcap_reader.make_reader(f, decoder_factories=[decoder.DecoderFactory()])
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        assert summary.chunk_indexes  # indexed: a viewer seeks without reading the whole file
        assert {s.encoding for s in summary.schemas.values()} == {"ros2msg"}
        assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
        edges, clouds = {}, []
        for _, channel, _, msg in reader.iter_decoded_messages():
            if channel.topic in ("/tf", "/tf_static"):
                edges.update({t.child_frame_id: t.header.frame_id for t in msg.transforms})
            elif channel.topic == "/blensor/points":
                clouds.append(msg)
    counts = [len(np.load(scanned / f"scan{f:05d}.npz")["range"]) for f in (0, 1)]
    assert [m.width * m.height for m in clouds] == counts
    assert {f.name for f in clouds[0].fields} >= {"x", "y", "z", "intensity"}
    frame, chain = clouds[0].header.frame_id, []
    while frame in edges and len(chain) < 10:  # the points' frame reaches the fixed frame
        chain.append(frame)
        frame = edges[frame]
    assert frame == "odom" and chain[0] == "blensor_sensor", chain
