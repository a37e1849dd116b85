"""Process set-up while BlenSor works: how this Python process uses memory and threads.

Not sensor physics and not scene handling: settings of the C allocator that let a scan's
arrays reuse freed pages (:mod:`.alloc`), one BLAS thread while scans and writes run
(:mod:`.blas`), and Blender's messages on stderr passed on escaped (:mod:`.messages`).
numpy, ctypes and threadpoolctl only; this package sits beside ``core``
at the bottom of the layers (core <- raycast <- scene <- io <- jobs <- ui/cli): any layer
may import it, and it imports nothing of the add-on above ``core``.
"""
