"""The project's own maintenance tools: executing and stamping the committed notebooks, checking their figures,
and the gettext bookkeeping of the Portuguese. Maintainers run them from the repository root (`python -m tools....`,
the Makefile); they are not part of the `kvlab` package users install, and may import what only the `test` extra
brings (nbformat, nbclient, jupytext)."""
