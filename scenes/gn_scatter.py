"""A Geometry Nodes scatter: ``n x n`` instances of a 12-triangle box on a grid, for the
instance-extraction tests and the 10^6-instance benchmark row.

Use from Blender or pip ``bpy``: ``make_gn_scatter(bpy, n, size)`` adds the objects to
the current scene and returns the instancer. The box object itself is hidden.
"""
from __future__ import annotations


def make_gn_scatter(bpy, n: int = 1000, size: float = 500.0, box_half: float = 0.1, z: float = 0.0,
                    material=None):
    """Add a grid of ``n * n`` Geometry Nodes instances (spacing ``size / (n - 1)`` m, in
    the plane z = ``z``) of a box of half size ``box_half`` m, the box object ``"Box"``
    (hidden from render and viewport) and the instancer ``"Scatter"``; returns it.
    ``material`` (optional) goes on the box mesh."""
    h = box_half
    verts = [(x * h, y * h, s * h) for x in (-1, 1) for y in (-1, 1) for s in (-1, 1)]
    faces = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    box_mesh = bpy.data.meshes.new("Box")
    box_mesh.from_pydata(verts, [], faces)
    if material is not None:
        box_mesh.materials.append(material)
    box = bpy.data.objects.new("Box", box_mesh)
    bpy.context.scene.collection.objects.link(box)
    box.hide_render = box.hide_viewport = True
    ob = bpy.data.objects.new("Scatter", bpy.data.meshes.new("ScatterBase"))
    ob.location = (0.0, 0.0, z)
    bpy.context.scene.collection.objects.link(ob)
    tree = bpy.data.node_groups.new("Scatter", "GeometryNodeTree")
    tree.interface.new_socket("Geometry", in_out="OUTPUT", socket_type="NodeSocketGeometry")
    grid = tree.nodes.new("GeometryNodeMeshGrid")
    grid.inputs["Vertices X"].default_value = n
    grid.inputs["Vertices Y"].default_value = n
    grid.inputs["Size X"].default_value = size
    grid.inputs["Size Y"].default_value = size
    on_points = tree.nodes.new("GeometryNodeInstanceOnPoints")
    info = tree.nodes.new("GeometryNodeObjectInfo")
    info.inputs["Object"].default_value = box
    out = tree.nodes.new("NodeGroupOutput")
    tree.links.new(grid.outputs["Mesh"], on_points.inputs["Points"])
    tree.links.new(info.outputs["Geometry"], on_points.inputs["Instance"])
    tree.links.new(on_points.outputs["Instances"], out.inputs["Geometry"])
    ob.modifiers.new("Scatter", "NODES").node_group = tree
    return ob
