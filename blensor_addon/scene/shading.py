"""Blender materials -> what a ray meets: reflectivity, glass, mirror and textures.

Owns the reading of a material for a scan (:func:`evaluate_material`: the override, the
reflectance library entry, or the Principled/Diffuse/Glass node tree, reference section
3.4 for the original's single reflectivity), the images of textured materials
(:class:`ImageCache`, read once per scan, bounded) and the per-triangle UVs they are
sampled with (:func:`triangle_uvs`). numpy and bpy only; :mod:`.extract` builds the
scan's material table from these.
"""
from __future__ import annotations

import collections
import os
import stat
from dataclasses import dataclass

import numpy as np

from .. import compat
from ..core.errors import SettingsError
from ..core.files import file_kind
from ..core.materials import (
    DEFAULT_REFLECTIVITY,
    DEFAULT_WAVELENGTH,
    GLASS_ENTRY,
    library,
    luminance,
    retro_from_ra,
    sanitize_texels,
)


def linear_to_srgb_u8(rgb) -> np.ndarray:
    """Linear RGB in [0, 1] -> sRGB-encoded uint8 (IEC 61966-2-1 transfer function)."""
    c = np.clip(np.asarray(rgb, dtype=np.float64), 0.0, 1.0)
    s = np.where(c <= 0.0031308, 12.92 * c, 1.055 * np.power(c, 1.0 / 2.4) - 0.055)
    return np.round(s * 255.0).astype(np.uint8)


def material_color(mat) -> tuple[float, float, float]:
    """Base colour of a material (linear RGB): the Principled BSDF's Base Color input if
    the node tree has one, else the viewport ``diffuse_color``."""
    if mat.node_tree is not None:
        for node in mat.node_tree.nodes:
            if node.type == "BSDF_PRINCIPLED":
                c = node.inputs["Base Color"].default_value
                return (c[0], c[1], c[2])
    c = mat.diffuse_color
    return (c[0], c[1], c[2])


def material_properties(mat) -> tuple[float, bool]:
    """(reflectivity, mirror) of a material as a scan uses them (:func:`evaluate_material`;
    0.8 / False when the add-on's properties are absent and the node tree says nothing
    else)."""
    ev = evaluate_material(mat)
    return ev.reflectivity, ev.mirror


#: Principled BSDF Metallic at or above which a material is a mirror (the existing total
#: reflection model, seed 000 section 3.5): a half-metallic surface reflects more than it
#: scatters. Glossy BSDF counts as metallic 1.
METALLIC_MIRROR = 0.5
#: IOR of glass when the node tree gives none (Blender's Glass BSDF default is 1.5;
#: MaterialTable.optics' default 1.45 is the Principled BSDF's)
DEFAULT_IOR = 1.45


@dataclass
class MaterialEval:
    """What a scan takes from one material (:func:`evaluate_material`).

    Attributes:
        reflectivity: diffuse reflectivity at 905 nm (textured: ``offset + scale * mean
            texel``); mirror: total reflection; color: linear RGB (the colour column).
        transmission [0, 1], ior >= 1, alpha [0, 1]: glass share, its index of refraction,
            coverage (MaterialTable.transmission/ior/alpha).
        source: where the reflectivity comes from: ``"override"`` (``blensor.reflectivity``
            set), ``"library"`` (``blensor.library`` names an entry), ``"nodes"`` (the node
            tree) or ``"default"`` (:data:`DEFAULT_REFLECTIVITY`: nothing understood).
        entry: the library entry (source ``"library"``); texture: {"image", "uv_map",
            "scale", "offset", "mapping", "interpolation", "extension"} of an image texture
            feeding the base colour (source ``"nodes"``), else None.
        warning: why part of the node tree was not understood, and the inputs clipped to
            their range (one line), else None.
    """

    reflectivity: float = DEFAULT_REFLECTIVITY
    mirror: bool = False
    color: tuple = (0.8, 0.8, 0.8)
    transmission: float = 0.0
    ior: float = DEFAULT_IOR
    alpha: float = 1.0
    source: str = "default"
    entry: object = None
    texture: dict | None = None
    warning: str | None = None
    #: (f0, GGX alpha, R_A at 0 deg, R_A at 30 deg): the material's non-Lambertian lobes
    #: (:func:`~blensor_addon.core.materials.lobe_reflectance`; zeros: Lambertian)
    lobe: tuple = (0.0, 0.0, 0.0, 0.0)


class _NotUnderstood(Exception):
    """A node or link the evaluator does not understand (the message names it)."""


def _node_name(node) -> str:
    return f"'{node.name}' ({node.bl_idname})"


def _from_socket(socket):
    """The node and output feeding an input socket, through reroutes and muted nodes'
    pass-through (None: unlinked)."""
    links = [lk for lk in socket.links if lk.is_valid and not lk.is_muted] if socket.is_linked else []
    if not links:
        return None
    node, out = links[0].from_node, links[0].from_socket
    seen = 0
    while node.type == "REROUTE" and seen < 64:
        seen += 1
        nxt = [lk for lk in node.inputs[0].links if lk.is_valid and not lk.is_muted]
        if not nxt:
            return None
        node, out = nxt[0].from_node, nxt[0].from_socket
    return node, out


def _constant(node, name: str, index: int | None = None) -> float:
    """An unlinked float input's value; a linked one is not understood."""
    sock = node.inputs[name] if index is None else node.inputs[index]
    if _from_socket(sock) is not None:
        raise _NotUnderstood(f"input '{sock.name}' of node {_node_name(node)} is linked")
    return float(sock.default_value)


def _input(node, *names):
    for n in names:
        sock = node.inputs.get(n)
        if sock is not None:
            return sock
    return None


def _color(node, name: str) -> tuple:
    """(rgb constant or None, texture dict or None) of a colour input: unlinked, or linked
    from an Image Texture's Color output (optionally through its Vector input from a UV
    Map / Texture Coordinate UV output, or a Mapping node on them)."""
    sock = node.inputs[name]
    src = _from_socket(sock)
    if src is None:
        c = sock.default_value
        return (float(c[0]), float(c[1]), float(c[2])), None
    tex, out = src
    if tex.type != "TEX_IMAGE" or out.name != "Color":
        raise _NotUnderstood(f"node {_node_name(tex)} feeding '{name}' of {_node_name(node)}")
    if tex.image is None:
        raise _NotUnderstood(f"image texture {_node_name(tex)} has no image")
    if tex.image.source == "TILED":
        raise _NotUnderstood(f"image texture {_node_name(tex)} uses UDIM tiles")
    if getattr(tex, "projection", "FLAT") != "FLAT":
        raise _NotUnderstood(f"image texture {_node_name(tex)} uses {tex.projection} projection")
    mapping = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    uv_map = ""
    vec = _from_socket(tex.inputs["Vector"])
    if vec is not None and vec[0].type == "MAPPING":
        mp = vec[0]
        if mp.vector_type not in ("POINT", "TEXTURE"):
            raise _NotUnderstood(f"mapping {_node_name(mp)} of type {mp.vector_type}")
        loc = _vector_constant(mp, "Location")
        rot = _vector_constant(mp, "Rotation")
        scale = _vector_constant(mp, "Scale")
        if any(abs(r) > 1e-12 for r in rot):
            raise _NotUnderstood(f"mapping {_node_name(mp)} with a rotation")
        if mp.vector_type == "POINT":  # out = v * S + L
            mapping = np.array([[scale[0], 0.0, loc[0]], [0.0, scale[1], loc[1]]])
        else:  # TEXTURE: the inverse, (v - L) / S
            if abs(scale[0]) < 1e-12 or abs(scale[1]) < 1e-12:
                raise _NotUnderstood(f"mapping {_node_name(mp)} with a zero scale")
            mapping = np.array([[1 / scale[0], 0.0, -loc[0] / scale[0]],
                                [0.0, 1 / scale[1], -loc[1] / scale[1]]])
        vec = _from_socket(mp.inputs["Vector"])
    if vec is not None:
        vnode, vout = vec
        if vnode.type == "UVMAP":
            uv_map = vnode.uv_map
        elif not (vnode.type == "TEX_COORD" and vout.name == "UV"):
            raise _NotUnderstood(f"node {_node_name(vnode)} feeding the texture coordinates of "
                                 f"{_node_name(tex)}")
    return None, {"image": tex.image, "uv_map": uv_map, "mapping": mapping,
                  "interpolation": "closest" if tex.interpolation == "Closest" else "linear",
                  "extension": tex.extension if tex.extension in ("REPEAT", "EXTEND", "CLIP", "MIRROR")
                  else "REPEAT", "node": tex}


def _vector_constant(node, name: str) -> tuple:
    sock = node.inputs[name]
    if _from_socket(sock) is not None:
        raise _NotUnderstood(f"input '{name}' of node {_node_name(node)} is linked")
    return tuple(float(x) for x in sock.default_value)


class _Closure:
    """A shader's share of the surface, as sums weighted by coverage: ``cov`` (alpha),
    ``refl`` (constant diffuse reflectivity times the opaque share), ``tex_w`` (weight of the
    texture's luminance, times the opaque share), ``metal``, ``trans`` (transmitted share),
    ``ior_w`` (transmission-weighted IOR). The opaque share is ``cov - trans``.
    Mix Shader combines closures linearly; :func:`evaluate_material` divides by the sums."""

    __slots__ = ("cov", "refl", "tex_w", "tex", "metal", "trans", "ior_w")

    def __init__(self, cov=0.0, refl=0.0, tex_w=0.0, tex=None, metal=0.0, trans=0.0, ior_w=0.0):
        self.cov, self.refl, self.tex_w, self.tex = cov, refl, tex_w, tex
        self.metal, self.trans, self.ior_w = metal, trans, ior_w

    def scaled(self, f: float) -> "_Closure":
        return _Closure(self.cov * f, self.refl * f, self.tex_w * f, self.tex, self.metal * f, self.trans * f,
                        self.ior_w * f)

    def plus(self, o: "_Closure") -> "_Closure":
        if self.tex is not None and o.tex is not None and self.tex["node"] != o.tex["node"]:
            raise _NotUnderstood("a mix of two image textures")
        return _Closure(self.cov + o.cov, self.refl + o.refl, self.tex_w + o.tex_w,
                        self.tex if self.tex is not None else o.tex, self.metal + o.metal,
                        self.trans + o.trans, self.ior_w + o.ior_w)


def _glass_reflectivity() -> float:
    entry = library().get(GLASS_ENTRY)
    return entry.at(DEFAULT_WAVELENGTH) if entry is not None else 0.0


#: the largest index of refraction a material may give (larger IORs are clamped to it, NaN ones replaced)
MAX_IOR = 10.0


def _checked(node, name: str, value: float, lo: float, hi: float, nan: float, notes: list | None) -> float:
    """``value`` of input ``name`` of ``node`` clipped to [lo, hi] (NaN -> ``nan``); a
    value that had to change is noted in ``notes`` (one line each) for the material's warning
    (a bad IOR, transmission, alpha, metallic or mix factor)."""
    fixed = nan if value != value else min(max(value, lo), hi)
    if fixed != value and notes is not None:
        notes.append(f"input '{name}' of node {_node_name(node)} is {value:g}, outside [{lo:g}, {hi:g}]; "
                     f"{fixed:g} is used")
    return fixed


def _diffuse(rgb, tex, metal=0.0, trans=0.0, ior=DEFAULT_IOR) -> _Closure:
    """Closure of a diffuse-ish shader with base colour ``rgb`` or texture ``tex`` on its
    opaque share ``1 - trans``; the transmitted share ``trans`` is glass of IOR ``ior``."""
    opaque = 1.0 - trans
    if tex is not None:
        return _Closure(1.0, 0.0, opaque, tex, metal, trans, trans * ior)
    return _Closure(1.0, opaque * float(luminance(rgb)), 0.0, None, metal, trans, trans * ior)


def _shader(node, depth: int = 0, notes: list | None = None) -> _Closure:
    """The closure of the shader ``node`` (see :class:`_Closure`); inputs out of range are
    clipped and noted in ``notes`` (:func:`_checked`)."""
    if depth > 32:
        raise _NotUnderstood("shader mixes nested more than 32 deep")
    t = node.type
    if t == "BSDF_PRINCIPLED":
        rgb, tex = _color(node, "Base Color")
        metal = _checked(node, "Metallic", _constant(node, "Metallic"), 0.0, 1.0, 0.0, notes)
        trans_sock = _input(node, "Transmission Weight", "Transmission")
        trans = 0.0
        if trans_sock is not None:
            trans = _checked(node, trans_sock.name, _constant(node, trans_sock.name), 0.0, 1.0, 0.0, notes)
        ior = _checked(node, "IOR", _constant(node, "IOR"), 1.0, MAX_IOR, DEFAULT_IOR, notes)
        alpha = _checked(node, "Alpha", _constant(node, "Alpha"), 0.0, 1.0, 1.0, notes)
        return _diffuse(rgb, tex, metal, trans, ior).scaled(alpha)
    if t == "BSDF_DIFFUSE":
        rgb, tex = _color(node, "Color")
        return _diffuse(rgb, tex)
    if t == "BSDF_GLASS":
        ior = _checked(node, "IOR", _constant(node, "IOR"), 1.0, MAX_IOR, DEFAULT_IOR, notes)
        return _Closure(1.0, 0.0, 0.0, None, 0.0, 1.0, ior)
    if t == "BSDF_GLOSSY":
        rgb, tex = _color(node, "Color")
        return _diffuse(rgb, tex, metal=1.0)
    if t == "BSDF_TRANSPARENT":
        return _Closure()
    if t == "MIX_SHADER":
        f = _checked(node, "Fac", _constant(node, "Fac", 0), 0.0, 1.0, 0.5, notes)
        parts = []
        for i, w in ((1, 1.0 - f), (2, f)):
            src = _from_socket(node.inputs[i])
            if w == 0.0:
                continue
            if src is None:  # an unlinked shader input: nothing (black, no coverage in Cycles)
                raise _NotUnderstood(f"mix shader {_node_name(node)} with an empty shader input")
            parts.append(_shader(src[0], depth + 1, notes).scaled(w))
        out = _Closure()
        for p in parts:
            out = out.plus(p)
        return out
    raise _NotUnderstood(f"shader node {_node_name(node)}")


def _principled_lobe(mat) -> tuple[float, float]:
    """(f0, GGX alpha) of the specular coat of a material whose Surface is a Principled BSDF
    itself (a mix of shaders: (0, 0), Lambertian). Blender's Principled BSDF (4.x manual,
    'Principled BSDF': Roughness, IOR, Specular IOR Level, Metallic): alpha = Roughness^2
    (the GGX roughness of Cycles' microfacet closures), the dielectric's Fresnel at normal
    incidence ``((IOR - 1) / (IOR + 1))^2 x 2 x Specular IOR Level`` (3.x: ``0.08 x
    Specular``), mixed towards the Base Color's luminance by Metallic. Roughness 0 is taken
    as 0.01 (a perfect mirror is the ``mirror`` model's)."""
    if not compat.material_uses_nodes(mat):
        return (0.0, 0.0)
    try:
        out = mat.node_tree.get_output_node("CYCLES") or mat.node_tree.get_output_node("ALL")
        src = _from_socket(out.inputs["Surface"]) if out is not None else None
    except (TypeError, ValueError, AttributeError, KeyError, _NotUnderstood):
        return (0.0, 0.0)
    if src is None or src[0].type != "BSDF_PRINCIPLED":
        return (0.0, 0.0)
    node = src[0]
    try:
        rough = min(max(_constant(node, "Roughness"), 0.01), 1.0)
        metal = min(max(_constant(node, "Metallic"), 0.0), 1.0)
        if _input(node, "Specular IOR Level") is not None:
            ior = min(max(_constant(node, "IOR"), 1.0), MAX_IOR)
            f0 = ((ior - 1.0) / (ior + 1.0)) ** 2 * 2.0 * _constant(node, "Specular IOR Level")
        else:
            f0 = 0.08 * _constant(node, "Specular")
        rgb, _tex = _color(node, "Base Color")
    except (_NotUnderstood, KeyError, TypeError, ValueError):
        return (0.0, 0.0)
    base = float(luminance(rgb)) if rgb is not None else 0.0
    f0 = (1.0 - metal) * min(max(f0, 0.0), 1.0) + metal * base
    if not (f0 == f0 and rough == rough) or f0 <= 0.0:
        return (0.0, 0.0)
    return (float(f0), float(rough * rough))


def _surface_closure(mat, notes: list | None = None):
    """The :class:`_Closure` of the material's surface, None if the material has no node
    tree (Blender 4.2 with ``use_nodes`` off) or nothing is linked to the output; inputs
    clipped to their range are noted in ``notes``.

    Raises:
        _NotUnderstood: a node or link the evaluator does not understand.
    """
    if not compat.material_uses_nodes(mat):
        return None
    tree = mat.node_tree
    out = None
    for target in ("CYCLES", "EEVEE", "ALL"):
        try:
            out = tree.get_output_node(target)
        except (TypeError, ValueError, AttributeError):
            out = None
        if out is not None:
            break
    if out is None:
        return None
    src = _from_socket(out.inputs["Surface"])
    if src is None:
        return None
    return _shader(src[0], notes=notes)


def evaluate_material(mat) -> MaterialEval:
    """The reflectivity, mirror flag, glass and coverage a scan takes from a material.

    Reflectivity, in order: the material's ``blensor.reflectivity`` when it was set
    (``is_property_set``), the library entry ``blensor.library`` names, the node tree, else
    :data:`DEFAULT_REFLECTIVITY`. The node tree feeding the active Material Output's
    Surface is evaluated (:func:`_shader`): Principled BSDF (Base Color, Metallic,
    Transmission Weight / Transmission, IOR, Alpha), Diffuse BSDF (Color), Glass BSDF
    (transmission 1, IOR), Glossy BSDF (metallic 1), Transparent BSDF (coverage 0) and Mix
    Shader of these with a constant factor; an Image Texture (flat projection, UV
    coordinates from the active render UV map, a UV Map node or a Texture Coordinate UV,
    optionally through a Mapping node without rotation) may feed a colour. The diffuse
    reflectivity of a colour is its Rec. 709 luminance (:func:`luminance`). The
    reflectivity is that of the opaque share alone (the share-weighted mean over the
    shaders' opaque parts, not weighted by ``1 - transmission``: the tracer applies the
    diffuse share (1 - t)(1 - F), raycast/trace.py); a material with no opaque share (pure
    Glass BSDF) takes the library's ``glass`` entry (0.02), the value its specular return
    reports. IOR outside [1, :data:`MAX_IOR`] and transmission, alpha, metallic or a mix
    factor outside [0, 1] are clipped (NaN: the default) and named in ``warning``.
    Metallic >= :data:`METALLIC_MIRROR`
    makes a mirror (as does a library entry marked ``mirror``), unless ``blensor.mirror`` was
    set. Anything else leaves the node tree
    out (reflectivity from the override, the library or the default; opaque, no mirror)
    and sets ``warning``. Never raises for a node tree."""
    props = getattr(mat, "blensor", None)
    ev = MaterialEval()
    tree_mat = mat
    closure, warning, notes = None, None, []
    try:
        closure = _surface_closure(tree_mat, notes)
    except _NotUnderstood as e:
        warning = str(e)
    if closure is None and warning is None and not compat.material_uses_nodes(mat):
        # Blender 4.2 without nodes: the viewport colour and metallic
        c = mat.diffuse_color
        closure = _diffuse((c[0], c[1], c[2]), None, float(getattr(mat, "metallic", 0.0)))
    if closure is not None and closure.cov > 1e-9:
        cov = closure.cov
        ev.alpha = min(cov, 1.0)
        ev.transmission = min(max(closure.trans / cov, 0.0), 1.0)
        ev.ior = closure.ior_w / closure.trans if closure.trans > 1e-9 else DEFAULT_IOR
        ev.ior = min(max(ev.ior, 1.0), MAX_IOR) if ev.ior == ev.ior else DEFAULT_IOR
        metal = closure.metal / cov
        ev.mirror = metal >= METALLIC_MIRROR
        # the reflectivity is the opaque share's own (not weighted by it):
        # the tracer weights it by the diffuse share (1 - t)(1 - F); clear glass (no opaque
        # share) takes the library's glass entry, the reflectivity of its specular return
        opaque = cov - closure.trans
        if opaque <= 1e-9:
            ev.reflectivity = _glass_reflectivity()
        elif closure.tex is not None:
            ev.texture = dict(closure.tex, scale=closure.tex_w / opaque, offset=closure.refl / opaque)
            ev.reflectivity = ev.texture["offset"] + ev.texture["scale"] * 0.8
        else:
            ev.reflectivity = closure.refl / opaque
        ev.source = "nodes"
        if not ev.mirror and closure.trans <= 1e-9:
            ev.lobe = (*_principled_lobe(mat), 0.0, 0.0)
    elif closure is not None:  # fully transparent: nothing to reflect
        ev.alpha = 0.0
        ev.source = "nodes"
    ev.color = material_color(mat)  # the colour column, unchanged by the return physics
    if props is not None:
        name = str(getattr(props, "library", "") or "")
        if props.is_property_set("reflectivity"):
            ev.reflectivity, ev.source, ev.texture = float(props.reflectivity), "override", None
            ev.lobe = (0.0, 0.0, 0.0, 0.0)
        elif name:
            entry = library().get(name)
            if entry is None:
                warning = (warning + "; " if warning else "") + f"library entry '{name}' does not exist"
            else:
                ev.reflectivity, ev.source, ev.entry, ev.texture = entry.at(None), "library", entry, None
                ev.lobe = (0.0, 0.0, *entry.retro)
                ev.mirror = ev.mirror or entry.mirror
        if props.is_property_set("mirror"):
            ev.mirror = bool(props.mirror)
        r_a = float(getattr(props, "retroreflection", 0.0) or 0.0)
        if r_a > 0.0:  # the material setting: a retroreflector whatever the reflectivity's source
            ev.lobe = (*ev.lobe[:2], *retro_from_ra(r_a))
    if ev.source == "default":
        ev.reflectivity = DEFAULT_REFLECTIVITY
    if notes:  # inputs clipped to their range, in the material's one warning
        warning = "; ".join(([warning] if warning else []) + notes)
    ev.warning = warning
    return ev


def material_source(mat) -> str:
    """One line saying where a material's reflectivity comes from (the material panel)."""
    ev = evaluate_material(mat)
    if ev.source == "override":
        return f"Reflectivity set: {ev.reflectivity:.3f}"
    if ev.source == "library":
        return f"Library entry '{ev.entry.name}': {ev.reflectivity:.3f} at 905 nm"
    if ev.source == "nodes":
        if ev.texture is not None:
            return f"Node tree: image '{ev.texture['image'].name}' luminance"
        return f"Node tree: {ev.reflectivity:.3f} (base colour luminance)"
    return f"Default {DEFAULT_REFLECTIVITY}" + (f" ({ev.warning})" if ev.warning else "")


#: the most memory the images of textured materials may hold in one scan, in bytes (their
#: luminance, 4 bytes per texel); the least recently used image is dropped beyond it
IMAGE_CACHE_BYTES = 512 * 2**20


def srgb_to_linear(s: np.ndarray) -> np.ndarray:
    """sRGB-encoded values in [0, 1] -> linear (IEC 61966-2-1 inverse transfer function)."""
    s = np.asarray(s, dtype=np.float32)
    return np.where(s <= 0.04045, s / np.float32(12.92),
                    np.power((s + np.float32(0.055)) / np.float32(1.055), np.float32(2.4))).astype(np.float32)


#: image sources whose pixels Blender reads from a file (GENERATED and VIEWER have none)
_FILE_SOURCES = ("FILE", "SEQUENCE", "MOVIE", "TILED")


def image_files(image) -> list[str]:
    """The files Blender reads the pixels of ``image`` (a ``bpy.types.Image``) from:
    its path made absolute (``//`` relative to the .blend, or to the library the image
    comes from), one per UDIM tile for a tiled image; [] for a packed or generated one."""
    import bpy
    if image.source not in _FILE_SOURCES or image.packed_file is not None or len(image.packed_files):
        return []
    path = image.filepath
    if not path:
        return []
    path = bpy.path.abspath(path, library=image.library)
    if image.source != "TILED" or ("<UDIM>" not in path and "<UVTILE>" not in path):
        return [path]
    out = []
    for tile in image.tiles:
        n = tile.number - 1001
        uvtile = f"u{n % 10 + 1}_v{n // 10 + 1}"
        out.append(path.replace("<UDIM>", str(tile.number)).replace("<UVTILE>", uvtile))
    return out


def check_image_files(images) -> None:
    """Refuse an image whose file exists but is no regular file, before Blender opens it:
    Blender's image reader blocks in ``open()`` on a FIFO (and no signal reaches Python
    there) and may never finish a device. A missing file is no error here (the material
    falls back with a warning, as Blender shows it pink).

    Args:
        images: ``bpy.types.Image`` objects (``bpy.data.images``, or one in a list).
    Raises:
        SettingsError (``image 'NAME'``): naming the file and what it is (a FIFO, a
        device, a folder, a socket).
    """
    for image in images:
        for path in image_files(image):
            try:
                mode = os.stat(path).st_mode
            except (OSError, ValueError):  # missing (or a NUL in the path): the material's warning
                continue
            if not stat.S_ISREG(mode):
                raise SettingsError(f"image '{image.name_full}'", "an image file that is a regular file (or "
                                    "missing)", f"{path} ({file_kind(mode)})")


class ImageCache:
    """Images of textured materials as (H, W) float32 luminance, read once per scan.

    Pixels are copied with ``foreach_get``; 8-bit images in an sRGB colour space are
    decoded to linear, float images and non-colour data are taken as they are. At most
    ``max_bytes`` (:data:`IMAGE_CACHE_BYTES`) are kept: beyond it the least recently used
    image is dropped (a snapshot that uses it keeps its own reference; the next reads it
    again). An image larger than the cap alone is used but not kept.

    Texels are sanitized as they are read (:func:`~blensor_addon.core.materials.sanitize_texels`,
    NaN -> 0, clipped to [0, 10]); ``replaced`` maps an image's name to
    the number of its texels that were replaced (the extractor warns once per image)."""

    def __init__(self, max_bytes: int = IMAGE_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.images: collections.OrderedDict = collections.OrderedDict()
        self.nbytes = 0
        self.replaced: dict[str, int] = {}

    def get(self, image) -> np.ndarray | None:
        """(H, W) float32 luminance of a Blender image; None if it has no pixels (a missing
        file, an unreadable format).

        Raises:
            SettingsError (``image 'NAME'``): its file is a FIFO, a device or a folder
            (:func:`check_image_files`, before ``image.size`` makes Blender open it).
        """
        check_image_files([image])
        key = (image.session_uid, image.name_full, tuple(image.size))
        lum = self.images.get(key)
        if lum is not None:
            self.images.move_to_end(key)
            return lum
        lum = self._read(image)
        if lum is None:
            return None
        lum, n_bad = lum
        if n_bad:
            self.replaced[image.name_full] = n_bad
        if lum.nbytes <= self.max_bytes:
            self.images[key] = lum
            self.nbytes += lum.nbytes
            while self.nbytes > self.max_bytes:
                _, old = self.images.popitem(last=False)
                self.nbytes -= old.nbytes
        return lum

    @staticmethod
    def _read(image) -> tuple[np.ndarray, int] | None:
        """((H, W) float32 luminance, number of texels sanitized) of ``image``; None if it
        has no pixels."""
        try:
            n = len(image.pixels)  # loads the file (or packed data) if needed
        except (RuntimeError, ReferenceError):
            return None
        w, h = image.size[0], image.size[1]
        if n == 0 or w == 0 or h == 0 or n % (w * h):
            return None
        px = np.empty(n, np.float32)
        image.pixels.foreach_get(px)
        ch = n // (w * h)
        px = px.reshape(h, w, ch)
        rgb = px[..., :3] if ch >= 3 else np.repeat(px[..., :1], 3, axis=2)
        cs = image.colorspace_settings
        rgb, n_bad = sanitize_texels(rgb)  # NaN/inf/negative texels of float images
        if not image.is_float and not cs.is_data and "srgb" in cs.name.lower():
            rgb = srgb_to_linear(rgb)
        return luminance(rgb).astype(np.float32), n_bad


def triangle_uvs(mesh, uv_map: str = "") -> np.ndarray | None:
    """(T, 3, 2) float32 UVs of the three corners of every loop triangle of ``mesh`` (the
    order of :func:`mesh_arrays`) from the UV map ``uv_map`` ("" = the active render UV
    map); None if the mesh has no such UV map. Two ``foreach_get`` copies and one gather."""
    layers = mesh.uv_layers
    if len(layers) == 0:
        return None
    if uv_map:
        layer = layers.get(uv_map)
    else:
        layer = next((lay for lay in layers if lay.active_render), None) or layers.active
    if layer is None:
        return None
    nl = len(mesh.loops)
    uv = np.empty(nl * 2, np.float32)
    if hasattr(layer, "uv"):
        layer.uv.foreach_get("vector", uv)
    else:
        layer.data.foreach_get("uv", uv)
    tris = mesh.loop_triangles
    nt = len(tris)
    loops = np.empty(nt * 3, np.int32)
    tris.foreach_get("loops", loops)
    return uv.reshape(-1, 2)[loops].reshape(nt, 3, 2)
