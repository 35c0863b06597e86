"""A thin entry point to the dashboard for a source checkout: ``python -m tui [--home DIR]``.

The dashboard itself is :mod:`swarmnode.tui` (installed with the package as ``swarmnode tui``);
this directory is not installed, so it puts no generic ``tui`` name into site-packages.
"""
