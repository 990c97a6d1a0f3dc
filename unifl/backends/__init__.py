"""Hardware implementations of the layers: one folder per backend, found by
:mod:`unifl.core.registry` (plus plug-ins registered through the ``unifl.backends`` entry point group).

A backend folder imports only :mod:`unifl.core` and itself; nothing outside the folder names it.
"""
